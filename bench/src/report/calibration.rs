//! The calibration scenarios' own table and targets: after the first minute, how far
//! infergate's predicted TTFT is from the observed one, and how evenly each policy
//! spreads the queued prefill (see `crate::calibration`).

use std::fmt::Write;

use super::{WorkloadReport, fmt_ms};
use crate::calibration::CalibrationResult;

/// The median relative TTFT prediction error the issue allows after the first minute.
pub const MAX_TTFT_ERROR: f64 = 0.25;
/// The most queued prefill one pod may hold, in fair shares.
pub const MAX_PREFILL_SHARE: f64 = 1.5;

fn at_top<'a>(report: &'a WorkloadReport, policy: &str) -> Option<&'a CalibrationResult> {
    report.policy(policy)?.runs.get(report.top_step())?.calibration.as_ref()
}

fn percent(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_string(), |x| format!("{:.1}%", 100.0 * x))
}

/// The table of the heaviest step, or nothing for a workload that does not measure it.
pub fn markdown(report: &WorkloadReport) -> String {
    let rows: Vec<(&str, &CalibrationResult)> =
        report.policies.iter().filter_map(|p| Some((p.policy.as_str(), at_top(report, &p.policy)?))).collect();
    let Some((_, first)) = rows.first() else { return String::new() };
    let mut out = format!(
        "\nAfter {} s (requests routed then; queued prefill while every pod is present):\n\n| policy | TTFT p50 | p90 | median \\|pred−obs\\|/obs | median pred/obs | max pod share of queued prefill / fair | per pod |\n|---|---:|---:|---:|---:|---:|---|\n",
        first.from_s
    );
    for (policy, c) in rows {
        let per_pod: Vec<String> = c.prefill_share_ratios.iter().map(|r| format!("{r:.2}")).collect();
        let _ = writeln!(
            out,
            "| {policy} | {} | {} | {} | {} | {:.2}× | {} |",
            fmt_ms(c.ttft_ms.p50),
            fmt_ms(c.ttft_ms.p90),
            percent(c.ttft_error_median),
            c.predicted_over_observed_median.map_or_else(|| "–".to_string(), |x| format!("{x:.3}")),
            c.prefill_share_max_ratio,
            per_pod.join(" "),
        );
    }
    out
}

/// `(target, measured, met)` rows for infergate on a calibration workload.
pub fn target_rows(report: &WorkloadReport) -> Vec<(String, String, bool)> {
    let Some(c) = at_top(report, "infergate") else { return Vec::new() };
    let mut rows = Vec::new();
    if let Some(error) = c.ttft_error_median {
        rows.push((
            format!(
                "median \\|pred−obs\\|/obs after {} s ≤ {:.0}% ({} requests)",
                c.from_s,
                100.0 * MAX_TTFT_ERROR,
                c.predictions
            ),
            percent(Some(error)),
            error <= MAX_TTFT_ERROR,
        ));
    }
    rows.push((
        format!("max pod share of queued prefill ≤ {MAX_PREFILL_SHARE}× fair"),
        format!("{:.2}×", c.prefill_share_max_ratio),
        c.prefill_share_max_ratio <= MAX_PREFILL_SHARE,
    ));
    rows
}
