//! The P/D benchmark's tables: goodput per policy and load for each workload, then each
//! load's details (TTFT, ITL, end to end, share split).

use std::fmt::Write;

use super::summary::{PdResult, WorkloadRuns};

fn ms(ms: f64) -> String {
    if ms >= 10_000.0 { format!("{:.1} s", ms / 1000.0) } else { format!("{ms:.0}") }
}

fn load(value: f64, unit: &str) -> String {
    format!("{value} {unit}")
}

/// Every workload's tables, in Markdown.
pub fn markdown(runs: &[WorkloadRuns]) -> String {
    let mut out = String::new();
    for workload in runs {
        let _ = writeln!(out, "### {}\n", workload.workload);
        let _ = writeln!(out, "Goodput (requests/s meeting the objective) by offered load ({}):\n", workload.load_unit);
        let _ = write!(out, "| policy | fleet |");
        for l in &workload.loads {
            let _ = write!(out, " {} |", load(*l, &workload.load_unit));
        }
        let _ = write!(out, "\n|---|---|");
        for _ in &workload.loads {
            out.push_str("---:|");
        }
        out.push('\n');
        let best: Vec<f64> = (0..workload.loads.len())
            .map(|i| {
                workload.policies.iter().filter_map(|(_, r)| r.get(i)).map(|r| r.goodput_per_s).fold(0.0, f64::max)
            })
            .collect();
        for (policy, results) in &workload.policies {
            let fleet = results.first().map_or("", |r| r.fleet.as_str());
            let _ = write!(out, "| {policy} | {fleet} |");
            for (r, top) in results.iter().zip(&best) {
                let cell = format!("{:.2}", r.goodput_per_s);
                let _ = if r.goodput_per_s >= *top && *top > 0.0 {
                    write!(out, " **{cell}** |")
                } else {
                    write!(out, " {cell} |")
                };
            }
            out.push('\n');
        }
        out.push('\n');
        for (i, l) in workload.loads.iter().enumerate() {
            let _ = writeln!(out, "At {}:\n", load(*l, &workload.load_unit));
            out.push_str(
                "| policy | goodput (req/s) | met | TTFT p50 (ms) | TTFT p90 (ms) | ITL p90 (ms) | request ITL p90, median (ms) | E2E mean (ms) | split | moved tokens, mean | unfinished |\n",
            );
            out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
            for (policy, results) in &workload.policies {
                if let Some(r) = results.get(i) {
                    row(&mut out, policy, r);
                }
            }
            out.push('\n');
        }
    }
    out
}

fn row(out: &mut String, policy: &str, r: &PdResult) {
    let _ = writeln!(
        out,
        "| {policy} | {:.2} | {:.1}% | {} | {} | {:.1} | {:.1} | {} | {:.0}% | {:.0} | {} |",
        r.goodput_per_s,
        100.0 * r.slo_attainment,
        ms(r.ttft_p50_ms),
        ms(r.ttft_p90_ms),
        r.itl_p90_ms,
        r.request_itl_p90_median_ms,
        ms(r.e2e_mean_ms),
        100.0 * r.split_share,
        r.transferred_tokens_mean,
        r.unfinished,
    );
}
