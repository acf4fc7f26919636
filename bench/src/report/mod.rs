//! Results of a suite: JSON (stable, for diffs), Markdown tables, and charts.

pub mod calibration;
pub mod charts;
pub mod e2e;
pub mod panels;

use std::fmt::Write;

use serde::Serialize;

use crate::results::RunResult;

#[derive(Debug, Clone, Serialize)]
pub struct PolicyRuns {
    pub policy: String,
    /// One result per load step, in step order.
    pub runs: Vec<RunResult>,
}

#[derive(Debug, Clone, Serialize)]
pub struct WorkloadReport {
    pub workload: String,
    pub seed: u64,
    /// The x-axis: offered requests (or conversations) per second.
    pub qps: Vec<f64>,
    pub policies: Vec<PolicyRuns>,
}

impl WorkloadReport {
    pub fn policy(&self, name: &str) -> Option<&PolicyRuns> {
        self.policies.iter().find(|p| p.policy == name)
    }

    /// The heaviest step, where policies differ most.
    pub fn top_step(&self) -> usize {
        self.qps.len().saturating_sub(1)
    }
}

fn fmt_ms(ms: f64) -> String {
    if ms >= 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else if ms >= 100.0 {
        format!("{ms:.0}")
    } else {
        format!("{ms:.1}")
    }
}

/// TTFT p90 per policy and step, then every metric at the heaviest step.
pub fn markdown(reports: &[WorkloadReport]) -> String {
    let mut out = String::new();
    for report in reports {
        let _ = writeln!(out, "### {}\n\nTTFT p90 (ms) by offered load (req/s):\n", report.workload);
        let _ = write!(out, "| policy |");
        for qps in &report.qps {
            let _ = write!(out, " {qps} |");
        }
        let _ = write!(out, "\n|---|");
        for _ in &report.qps {
            let _ = write!(out, "---:|");
        }
        out.push('\n');
        for policy in &report.policies {
            let _ = write!(out, "| {} |", policy.policy);
            for run in &policy.runs {
                let _ = write!(out, " {} |", fmt_ms(run.ttft_ms.p90));
            }
            out.push('\n');
        }
        let top = report.top_step();
        let _ = writeln!(
            out,
            "\nAt {} req/s:\n\n| policy | TTFT mean | p50 | p90 | p99 | TPOT p90 | E2E p90 | output tok/s | prefix hit | LoRA loads | failed | busy CV |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            report.qps.get(top).copied().unwrap_or_default()
        );
        for policy in &report.policies {
            if let Some(r) = policy.runs.get(top) {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {:.1} | {} | {:.0} | {:.1}% | {} | {} | {:.2} |",
                    policy.policy,
                    fmt_ms(r.ttft_ms.mean),
                    fmt_ms(r.ttft_ms.p50),
                    fmt_ms(r.ttft_ms.p90),
                    fmt_ms(r.ttft_ms.p99),
                    r.tpot_p90_ms,
                    fmt_ms(r.e2e_p90_ms),
                    r.output_tokens_per_s,
                    100.0 * r.prefix_hit_rate,
                    r.lora_loads,
                    r.failed,
                    r.load_imbalance_cv,
                );
            }
        }
        out.push_str(&calibration::markdown(report));
        out.push('\n');
    }
    out
}

/// The ratios the targets are stated in, from the heaviest step of each workload.
pub fn targets(reports: &[WorkloadReport]) -> String {
    let mut out = String::from("| workload | target | measured | met |\n|---|---|---:|:---:|\n");
    let p90 = |r: &WorkloadReport, policy: &str| {
        r.policy(policy).and_then(|p| p.runs.get(r.top_step())).map(|x| x.ttft_ms.p90)
    };
    let tput = |r: &WorkloadReport, policy: &str| {
        r.policy(policy).and_then(|p| p.runs.get(r.top_step())).map(|x| x.output_tokens_per_s)
    };
    let mut row = |workload: &str, target: &str, measured: String, met: bool| {
        let _ = writeln!(out, "| {workload} | {target} | {measured} | {} |", if met { "yes" } else { "no" });
    };
    for r in reports {
        let name = r.workload.as_str();
        for (target, measured, met) in calibration::target_rows(r) {
            row(name, &target, measured, met);
        }
        let Some(ours) = p90(r, "infergate") else { continue };
        if name == "bursty-chat" {
            if let Some(rr) = p90(r, "round_robin") {
                row(name, "TTFT p90 ≤ 0.10 × round_robin", format!("{:.3}×", ours / rr), ours <= 0.10 * rr);
            }
            if let Some(lr) = p90(r, "least_request") {
                row(name, "TTFT p90 < least_request", format!("{:.3}×", ours / lr), ours < lr);
            }
        }
        if name == "shared-prefix" {
            if let Some(random) = p90(r, "random") {
                row(
                    name,
                    "random / infergate TTFT p90 ≥ 100×",
                    format!("{:.1}×", random / ours),
                    random >= 100.0 * ours,
                );
            }
        }
        for peer in ["gie_default", "sglang_cache_aware", "dynamo_kv"] {
            if let Some(theirs) = p90(r, peer) {
                row(name, &format!("TTFT p90 < {peer}"), format!("{:.3}×", ours / theirs), ours < theirs);
            }
            if let (Some(a), Some(b)) = (tput(r, "infergate"), tput(r, peer)) {
                row(name, &format!("output tok/s ≥ {peer}"), format!("{:.3}×", a / b), a >= b * 0.999);
            }
        }
        if let Some(oracle) = p90(r, "oracle") {
            row(name, "TTFT p90 ≤ 1.25 × oracle", format!("{:.3}×", ours / oracle), ours <= 1.25 * oracle);
        }
    }
    out
}
