//! The peers bench's report: one table per workload and load, infergate against the
//! best real peer on TTFT p90 and mean (and by how much it is not below, where it is
//! not), and one chart of TTFT p90 with a panel per workload and load.

use std::fmt::Write as _;
use std::path::Path;

use super::{Gateway, PeerResults, PeerRun};
use crate::report::bars::Bars;
use crate::report::panels::policy_panels;
use crate::report::style::Unit;

/// A workload at a load, in the order the runs were made.
fn cases(runs: &[PeerRun]) -> Vec<(u8, String, f64)> {
    let mut cases: Vec<(u8, String, f64)> = Vec::new();
    for run in runs {
        let case = (run.part, run.workload.clone(), run.load);
        if !cases.contains(&case) {
            cases.push(case);
        }
    }
    cases
}

fn runs_of<'a>(runs: &'a [PeerRun], case: &(u8, String, f64)) -> Vec<&'a PeerRun> {
    runs.iter().filter(|r| r.part == case.0 && r.workload == case.1 && r.load == case.2).collect()
}

/// How a load is written for a workload.
pub fn load_label(workload: &str, load: f64) -> String {
    match workload {
        "agentic" => format!("{load} sessions at once"),
        "trace-replay" => format!("{load}× the trace's rate"),
        "bursty-chat" => format!("{load} conversations started/s"),
        _ => format!("{load} req/s"),
    }
}

/// A table cell: ms, or seconds from 10 s up.
fn ms(value: f64) -> String {
    if value >= 10_000.0 { format!("{:.1} s", value / 1000.0) } else { format!("{value:.0}") }
}

/// A value in a sentence, with its unit.
fn with_unit(value: f64) -> String {
    if value >= 10_000.0 { format!("{:.1} s", value / 1000.0) } else { format!("{value:.0} ms") }
}

/// A run that failed more than this share of its requests is left out of the
/// comparison: its TTFT is over a different, smaller set of requests.
pub const MAX_FAILED_SHARE: f64 = 0.01;

fn comparable(run: &PeerRun) -> bool {
    run.requests > 0 && run.failed as f64 <= MAX_FAILED_SHARE * run.requests as f64
}

/// infergate against the best comparable real peer on one figure: (peer, its value,
/// the ratio); `None` when infergate's own run is not comparable either.
fn against_best(runs: &[&PeerRun], figure: impl Fn(&PeerRun) -> f64) -> Option<(String, f64, f64)> {
    let ours = runs.iter().find(|r| r.gateway == "infergate" && comparable(r)).map(|r| figure(r))?;
    let best = runs
        .iter()
        .filter(|r| Gateway::is_real_peer(&r.gateway) && comparable(r))
        .min_by(|a, b| figure(a).total_cmp(&figure(b)))?;
    let theirs = figure(best);
    Some((best.gateway.clone(), theirs, if theirs > 0.0 { ours / theirs } else { f64::INFINITY }))
}

/// One sentence: whether infergate's p90 and mean are below every real peer's; and
/// which peers failed too many requests to compare.
pub fn verdict(runs: &[&PeerRun]) -> String {
    let p90 = against_best(runs, |r| r.ttft_ms.p90);
    let mean = against_best(runs, |r| r.ttft_ms.mean);
    let left_out: Vec<String> = runs
        .iter()
        .filter(|r| Gateway::is_real_peer(&r.gateway) && !comparable(r))
        .map(|r| format!("`{}` ({} of {} failed)", r.gateway, r.failed, r.requests))
        .collect();
    let left_out = if left_out.is_empty() {
        String::new()
    } else {
        format!(" Left out of the comparison, for failing over 1% of their requests: {}.", left_out.join(", "))
    };
    let compared = match (p90, mean) {
        (Some((p90_peer, p90_value, p90_ratio)), Some((mean_peer, mean_value, mean_ratio))) => {
            let says = |ratio: f64| if ratio < 1.0 { "below every real peer's" } else { "**not below**" };
            format!(
                "infergate's TTFT p90 is {} (`{p90_peer}`'s {}: {p90_ratio:.2}×); its mean is {} (`{mean_peer}`'s {}: {mean_ratio:.2}×).",
                says(p90_ratio),
                with_unit(p90_value),
                says(mean_ratio),
                with_unit(mean_value),
            )
        }
        _ => match runs.iter().find(|r| r.gateway == "infergate") {
            Some(ours) if !comparable(ours) => format!(
                "No comparison: **infergate failed {} of its {} requests**, over 1%.",
                ours.failed, ours.requests
            ),
            _ => "No comparison: infergate or every comparable real peer is missing from this case.".into(),
        },
    };
    compared + &left_out
}

/// One row per workload and load: infergate against the best comparable real peer, on
/// TTFT p90 and mean (ratios below 1 are infergate's wins), and the hit rates.
pub fn summary(runs: &[PeerRun]) -> String {
    let mut out = String::from(
        "| pods | workload | load | infergate p90 | best real peer's p90 | ratio | infergate mean | best real peer's mean | ratio | infergate hit rate | best real peer's hit rate |\n|---|---|---|---:|---|---:|---:|---|---:|---:|---|\n",
    );
    for case in cases(runs) {
        let runs = runs_of(runs, &case);
        let Some(ours) = runs.iter().find(|r| r.gateway == "infergate") else { continue };
        let p90 = against_best(&runs, |r| r.ttft_ms.p90);
        let mean = against_best(&runs, |r| r.ttft_ms.mean);
        let hit = runs
            .iter()
            .filter(|r| Gateway::is_real_peer(&r.gateway) && comparable(r))
            .max_by(|a, b| a.prefix_hit_rate.total_cmp(&b.prefix_hit_rate));
        let pods = if case.0 == 3 { "real vLLM" } else { "model-sim" };
        let cell = |best: Option<(String, f64, f64)>| match best {
            Some((peer, value, ratio)) => {
                let bold = if ratio < 1.0 { format!("**{ratio:.2}×**") } else { format!("{ratio:.2}×") };
                (format!("{} `{peer}`", ms(value)), bold)
            }
            None => ("–".into(), "–".into()),
        };
        let (p90_peer, p90_ratio) = cell(p90);
        let (mean_peer, mean_ratio) = cell(mean);
        let _ = writeln!(
            out,
            "| {pods} | {} | {} | {} | {p90_peer} | {p90_ratio} | {} | {mean_peer} | {mean_ratio} | {:.1}% | {} |",
            case.1,
            load_label(&case.1, case.2),
            ms(ours.ttft_ms.p90),
            ms(ours.ttft_ms.mean),
            ours.prefix_hit_rate * 100.0,
            hit.map_or_else(|| "–".into(), |h| format!("{:.1}% `{}`", h.prefix_hit_rate * 100.0, h.gateway)),
        );
    }
    out
}

pub fn markdown(results: &PeerResults) -> String {
    let mut out = String::from("# The peers' own routers beside infergate\n\n");
    let _ = writeln!(out, "Last run {}.", results.provenance.line());
    let commits = results.commits();
    if commits.len() > 1 {
        let list: Vec<String> = commits.iter().map(|(c, n)| format!("{c} ({n} runs)")).collect();
        let _ = writeln!(out, "The runs were made at {}.", list.join(", "));
    }
    let _ = writeln!(out, "Peers as installed: {}.\n", results.peers.join(", "));
    out.push_str("## Summary\n\nTTFT in ms, infergate against the best real peer that served 99% or more of its requests (a ratio below 1 is infergate's lead):\n\n");
    out.push_str(&summary(&results.runs));
    out.push('\n');
    for part in [2u8, 3] {
        let part_cases: Vec<_> = cases(&results.runs).into_iter().filter(|c| c.0 == part).collect();
        if part_cases.is_empty() {
            continue;
        }
        let heading = if part == 2 {
            "Part 2: model-sim pods, infergate in real Envoy, each peer router its own gateway"
        } else {
            "Part 3: real vLLM pods on CPU"
        };
        let _ = writeln!(out, "## {heading}\n");
        for case in &part_cases {
            let runs = runs_of(&results.runs, case);
            let pods = runs.first().map_or(0, |r| r.pods);
            let _ = writeln!(out, "### `{}` at {} ({pods} pods)\n", case.1, load_label(&case.1, case.2));
            out.push_str("| gateway | requests | failed | TTFT p50 ms | p90 ms | p99 ms | mean ms | engines' prefix hit rate |\n");
            out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|\n");
            for run in &runs {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {:.1}% |",
                    run.gateway,
                    run.requests,
                    run.failed,
                    ms(run.ttft_ms.p50),
                    ms(run.ttft_ms.p90),
                    ms(run.ttft_ms.p99),
                    ms(run.ttft_ms.mean),
                    run.prefix_hit_rate * 100.0
                );
            }
            let _ = writeln!(out, "\n{}\n", verdict(&runs));
        }
    }
    out
}

/// `peers-ttft-p90.svg` (and `.png`) in `dir`: a panel per workload and load.
pub fn chart(dir: &Path, results: &PeerResults) -> Result<(), String> {
    let cases = cases(&results.runs);
    let titles: Vec<String> = cases
        .iter()
        .map(|c| {
            let pods = if c.0 == 3 { "real vLLM" } else { "model-sim" };
            format!("{}, {} ({pods})", c.1, load_label(&c.1, c.2))
        })
        .collect();
    let bars: Vec<Vec<(String, f64)>> = cases
        .iter()
        .map(|c| runs_of(&results.runs, c).iter().map(|r| (r.gateway.clone(), r.ttft_ms.p90)).collect())
        .collect();
    let panels: Vec<Bars> = titles
        .iter()
        .zip(&bars)
        .map(|(title, bars)| Bars { title, metric: "TTFT p90", unit: Unit::Millis, bars })
        .collect();
    if panels.is_empty() {
        return Ok(());
    }
    policy_panels(&dir.join("peers-ttft-p90.svg"), "TTFT p90: infergate and the peers' own routers", &panels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Percentiles;

    fn run(gateway: &str, p90: f64, mean: f64, failed: usize) -> PeerRun {
        PeerRun {
            part: 2,
            workload: "agentic".into(),
            load: 16.0,
            gateway: gateway.into(),
            ttft_ms: Percentiles { mean, p50: 1.0, p90, p99: p90 * 2.0 },
            requests: 10,
            failed,
            prefix_hit_rate: 0.9,
            pods: 8,
            commit: String::new(),
        }
    }

    #[test]
    fn the_verdict_compares_with_the_best_real_peer_only() {
        // round_robin is faster but is no real peer; smg is the best real one.
        let runs = [
            run("infergate", 900.0, 400.0, 0),
            run("round_robin", 100.0, 50.0, 0),
            run("smg_cache_aware", 1000.0, 300.0, 0),
        ];
        let refs: Vec<&PeerRun> = runs.iter().collect();
        let said = verdict(&refs);
        assert!(said.contains("p90 is below every real peer's (`smg_cache_aware`'s 1000 ms: 0.90×)"), "{said}");
        assert!(said.contains("mean is **not below** (`smg_cache_aware`'s 300 ms: 1.33×)"), "{said}");
    }

    #[test]
    fn infergate_failing_is_said_not_hidden() {
        let runs = [run("infergate", 1.0, 1.0, 5), run("smg_cache_aware", 900.0, 400.0, 0)];
        let refs: Vec<&PeerRun> = runs.iter().collect();
        assert!(verdict(&refs).contains("**infergate failed 5 of its 10 requests**"), "{}", verdict(&refs));
        assert!(summary(&runs).contains("| – |"), "no ratio is claimed: {}", summary(&runs));
    }

    #[test]
    fn a_peer_that_failed_many_requests_is_no_comparison() {
        let runs = [
            run("infergate", 900.0, 400.0, 0),
            run("smg_cache_aware", 1.0, 1.0, 2),
            run("vllm_router_sticky", 950.0, 500.0, 0),
        ];
        let refs: Vec<&PeerRun> = runs.iter().collect();
        let said = verdict(&refs);
        assert!(said.contains("`vllm_router_sticky`'s 950 ms"), "{said}");
        assert!(
            said.contains(
                "Left out of the comparison, for failing over 1% of their requests: `smg_cache_aware` (2 of 10 failed)."
            ),
            "{said}"
        );
    }
}
