//! Results of a suite: JSON (stable, for diffs), Markdown tables, and charts.

pub mod bars;
pub mod calibration;
pub mod charts;
pub mod e2e;
pub mod panels;
pub mod style;

use std::fmt::Write;

use serde::Serialize;

use crate::results::RunResult;

#[derive(Debug, Clone, Serialize)]
pub struct PolicyRuns {
    pub policy: String,
    /// One result per load step, in step order: the mean over the seeds when several
    /// ran ([`RunResult::mean_over`]).
    pub runs: Vec<RunResult>,
    /// With several seeds, per load step, each seed's result in seed order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_seed: Vec<Vec<RunResult>>,
}

impl PolicyRuns {
    /// The smallest and largest of `figure` over the seeds at `step`, when several ran.
    pub fn spread(&self, step: usize, figure: impl Fn(&RunResult) -> f64) -> Option<(f64, f64)> {
        let runs = self.by_seed.get(step).filter(|runs| runs.len() > 1)?;
        let values = runs.iter().map(figure);
        Some(values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v))))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct WorkloadReport {
    pub workload: String,
    /// The first seed; with several, `seeds` lists them all.
    pub seed: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub seeds: Vec<u64>,
    /// The x-axis: offered requests (or conversations) per second.
    pub qps: Vec<f64>,
    pub policies: Vec<PolicyRuns>,
}

impl WorkloadReport {
    pub fn policy(&self, name: &str) -> Option<&PolicyRuns> {
        self.policies.iter().find(|p| p.policy == name)
    }

    /// What a load step counts: replay speed, concurrent sessions, or requests per second.
    pub fn load_unit(&self) -> &'static str {
        match self.workload.as_str() {
            "trace-replay" => "× the trace's recorded rate",
            "agentic" => "sessions at once",
            _ => "req/s",
        }
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

/// One table of `figure` per policy (rows) and load step (columns), each cell written
/// by `cell`: the seeds' mean, then their range in brackets when several ran.
fn by_load(
    out: &mut String,
    report: &WorkloadReport,
    title: &str,
    figure: impl Fn(&RunResult) -> f64,
    cell: impl Fn(f64) -> String,
) {
    let seeds = if report.seeds.len() > 1 {
        format!("; mean of seeds {}, their range in brackets", seed_list(&report.seeds))
    } else {
        String::new()
    };
    let _ = writeln!(out, "{title} by offered load ({}{seeds}):\n", report.load_unit());
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
        for (step, run) in policy.runs.iter().enumerate() {
            let _ = match policy.spread(step, &figure) {
                Some((lo, hi)) => write!(out, " {} ({}–{}) |", cell(figure(run)), cell(lo), cell(hi)),
                None => write!(out, " {} |", cell(figure(run))),
            };
        }
        out.push('\n');
    }
    out.push('\n');
}

/// "42–46" for consecutive seeds, else each.
fn seed_list(seeds: &[u64]) -> String {
    match (seeds.first(), seeds.last()) {
        (Some(first), Some(last)) if seeds.windows(2).all(|w| w[1] == w[0] + 1) => format!("{first}–{last}"),
        _ => seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
    }
}

/// The real-trace workloads, whose targets hold at every load step.
const EVERY_LOAD: [&str; 2] = ["trace-replay", "agentic"];

/// TTFT p90 per policy and step (and, for the real traces, mean and prefix hit rate),
/// then every metric at the heaviest step.
pub fn markdown(reports: &[WorkloadReport]) -> String {
    let mut out = String::new();
    for report in reports {
        let _ = writeln!(out, "### {}\n", report.workload);
        by_load(&mut out, report, "TTFT p90 (ms)", |r| r.ttft_ms.p90, fmt_ms);
        if EVERY_LOAD.contains(&report.workload.as_str()) {
            by_load(&mut out, report, "TTFT mean (ms)", |r| r.ttft_ms.mean, fmt_ms);
            by_load(&mut out, report, "Prefix hit rate", |r| r.prefix_hit_rate, |v| format!("{:.1}%", 100.0 * v));
        }
        if let Some(ours) = report.policy("infergate").filter(|p| p.runs.iter().any(|r| r.prefix_belief.is_some())) {
            out.push_str(&belief_markdown(report, ours));
        }
        let top = report.top_step();
        let seeds = if report.seeds.len() > 1 {
            format!(" (means of seeds {})", seed_list(&report.seeds))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "At {} {}{seeds}:\n\n| policy | TTFT mean | p50 | p90 | p99 | TPOT p90 | E2E p90 | output tok/s | prefix hit | LoRA loads | failed | busy CV |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            report.qps.get(top).copied().unwrap_or_default(),
            report.load_unit()
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

/// How infergate's prefix index matched the pods' caches, by load step.
fn belief_markdown(report: &WorkloadReport, ours: &PolicyRuns) -> String {
    let mut out = String::from(
        "infergate's prefix belief against the pods' caches (per request: the prompt tokens it believed its chosen pod held, and those the pod found):\n\n| load | requests | believed ÷ cached | believed more (> 64 tokens) | cached more | mean abs error (tokens) |\n|---:|---:|---:|---:|---:|---:|\n",
    );
    for (qps, run) in report.qps.iter().zip(&ours.runs) {
        if let Some(b) = &run.prefix_belief {
            let _ = writeln!(
                out,
                "| {qps} | {} | {:.3} | {:.1}% | {:.1}% | {:.0} |",
                b.requests,
                b.believed_over_cached,
                100.0 * b.optimistic_share,
                100.0 * b.pessimistic_share,
                b.mean_abs_error_tokens
            );
        }
    }
    out.push('\n');
    out
}

/// The real-trace targets at every load step: infergate's TTFT p90 and mean at most
/// every peer's, its prefix hit rate at least the best peer's.
fn every_load_rows(r: &WorkloadReport, row: &mut dyn FnMut(&str, &str, String, bool)) {
    let Some(ours) = r.policy("infergate") else { return };
    for (step, qps) in r.qps.iter().enumerate() {
        let Some(mine) = ours.runs.get(step) else { continue };
        let peers: Vec<(&str, &RunResult)> =
            PEER_POLICIES.iter().filter_map(|&p| Some((p, r.policy(p)?.runs.get(step)?))).collect();
        let worst = |value: fn(&RunResult) -> f64| {
            peers.iter().map(|(name, run)| (*name, value(mine) / value(run))).max_by(|a, b| a.1.total_cmp(&b.1))
        };
        let name = r.workload.as_str();
        if let Some((peer, ratio)) = worst(|x| x.ttft_ms.p90) {
            row(name, &format!("TTFT p90 ≤ every peer's at {qps}"), format!("{ratio:.3}× {peer}"), ratio <= 1.0);
        }
        if let Some((peer, ratio)) = worst(|x| x.ttft_ms.mean) {
            row(name, &format!("TTFT mean ≤ every peer's at {qps}"), format!("{ratio:.3}× {peer}"), ratio <= 1.0);
        }
        let best = peers.iter().map(|(n, run)| (*n, run.prefix_hit_rate)).max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((peer, theirs)) = best {
            let (a, b) = (100.0 * mine.prefix_hit_rate, 100.0 * theirs);
            row(
                name,
                &format!("prefix hit rate ≥ the best peer's at {qps}"),
                format!("{a:.1}% vs {b:.1}% {peer}"),
                a >= b,
            );
        }
    }
}

/// The peers' re-implemented policies every target compares with (`gie_lora` only
/// where it runs, the LoRA workloads).
const PEER_POLICIES: [&str; 5] = ["gie_default", "gie_lora", "llmd_precise", "sglang_cache_aware", "dynamo_kv"];

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
        if EVERY_LOAD.contains(&name) {
            every_load_rows(r, &mut row);
            continue;
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
        for peer in PEER_POLICIES {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Percentiles;

    fn run(p90: f64) -> RunResult {
        let mut run = RunResult::from_outcomes(&[]);
        run.ttft_ms = Percentiles { p90, ..Percentiles::default() };
        run.requests = 10;
        run
    }

    #[test]
    fn with_several_seeds_a_cell_is_their_mean_and_range() {
        let by_seed = vec![vec![run(100.0), run(300.0), run(200.0)]];
        let runs = by_seed.iter().filter_map(|r| RunResult::mean_over(r)).collect();
        let report = WorkloadReport {
            workload: "shared-prefix".into(),
            seed: 42,
            seeds: vec![42, 43, 44],
            qps: vec![5.0],
            policies: vec![PolicyRuns { policy: "infergate".into(), runs, by_seed }],
        };
        let mut out = String::new();
        by_load(&mut out, &report, "TTFT p90 (ms)", |r| r.ttft_ms.p90, fmt_ms);
        assert!(out.contains("mean of seeds 42–44, their range in brackets"), "{out}");
        assert!(out.contains("| infergate | 200 (100–300) |"), "{out}");
    }

    #[test]
    fn one_seed_writes_plain_cells() {
        let report = WorkloadReport {
            workload: "shared-prefix".into(),
            seed: 42,
            seeds: Vec::new(),
            qps: vec![5.0],
            policies: vec![PolicyRuns { policy: "infergate".into(), runs: vec![run(150.0)], by_seed: Vec::new() }],
        };
        let mut out = String::new();
        by_load(&mut out, &report, "TTFT p90 (ms)", |r| r.ttft_ms.p90, fmt_ms);
        assert!(out.contains("| infergate | 150 |"), "{out}");
        assert_eq!(seed_list(&[1, 5]), "1, 5");
    }
}
