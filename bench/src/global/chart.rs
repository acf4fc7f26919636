//! The tier-2 chart: latency TTFT p90 and cost per 1M tokens, one bar per layer.

use std::path::Path;

use super::GlobalResult;
use crate::report::panels::{INFERGATE_FIRST, policy_panels};

/// Writes an SVG with the two panels and a legend of the layers.
pub fn chart(path: &Path, results: &[GlobalResult]) -> Result<(), String> {
    let ttft: Vec<f64> = results.iter().map(|r| r.latency_ttft_p90_ms).collect();
    let cost: Vec<f64> = results.iter().map(|r| r.cost_per_million_tokens).collect();
    let names: Vec<&str> = results.iter().map(|r| r.policy.as_str()).collect();
    policy_panels(
        path,
        &[("latency-class TTFT p90 (ms)", ttft), ("cost per 1M tokens", cost)],
        &names,
        &INFERGATE_FIRST,
    )
}
