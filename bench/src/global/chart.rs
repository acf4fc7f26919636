//! The tier-2 chart: latency-class TTFT p90 and cost per 1M tokens, one bar per policy.

use std::path::Path;

use super::{GlobalResult, TwoRegions};
use crate::report::bars::Bars;
use crate::report::panels::policy_panels;
use crate::report::style::Unit;

/// Writes an SVG (and a PNG beside it) with the two panels, for `workload`.
pub fn chart(path: &Path, workload: &TwoRegions, results: &[GlobalResult]) -> Result<(), String> {
    let per_policy = |value: fn(&GlobalResult) -> f64| -> Vec<(String, f64)> {
        results.iter().map(|r| (r.policy.clone(), value(r))).collect()
    };
    let ttft = per_policy(|r| r.latency_ttft_p90_ms);
    let cost = per_policy(|r| r.cost_per_million_tokens);
    policy_panels(
        path,
        &format!(
            "two regions, east {}/s bursting to {}/s, west {}/s: tier 2 per policy",
            workload.east_qps, workload.east_burst_qps, workload.west_qps
        ),
        &[
            Bars { title: "latency class: TTFT p90", metric: "TTFT p90", unit: Unit::Millis, bars: &ttft },
            Bars { title: "cost per 1M tokens", metric: "cost per 1M tokens", unit: Unit::Plain(3), bars: &cost },
        ],
    )
}
