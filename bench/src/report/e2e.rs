//! Part 2's table: end-to-end through Envoy beside the discrete-event prediction.

use std::fmt::Write;
use std::path::Path;

use serde::Serialize;

use super::bars::Bars;
use super::style::Unit;
use crate::e2e::FollowUps;
use crate::results::RunResult;

#[derive(Debug, Clone, Serialize)]
pub struct E2eRow {
    pub policy: String,
    /// Gateway replicas (separate Envoys) the client spread the requests over.
    pub replicas: usize,
    /// Which generated request set (0: the one a single-set run uses).
    pub request_set: u64,
    /// The discrete-event run of the same requests.
    pub predicted: RunResult,
    /// Through real Envoy, at the client; the prefix hit rate is the pods' own.
    pub measured: RunResult,
    /// Where the conversations' follow-up turns went.
    pub follow_ups: FollowUps,
}

impl E2eRow {
    pub fn label(&self) -> String {
        run_label(&self.policy, self.replicas)
    }
}

/// How a run is named in the tables and charts: its policy, and its replicas if several.
pub fn run_label(policy: &str, replicas: usize) -> String {
    match replicas {
        1 => policy.to_string(),
        n => format!("{policy}, {n} replicas"),
    }
}

fn reduction(ours: f64, baseline: f64) -> f64 {
    if baseline > 0.0 { 100.0 * (1.0 - ours / baseline) } else { 0.0 }
}

/// One workload's table; `described` says what the workload is.
pub fn e2e_markdown(described: &str, rows: &[E2eRow], requests: usize, time_scale: f64) -> String {
    let mut out = format!(
        "\n### {described}\n\n{requests} requests generated; pods {time_scale}× slower than the engine model with arrivals stretched alike; times below are in simulated milliseconds. TTFT is the first SSE chunk at the client. With several replicas, consecutive turns of a conversation go to different replicas.\n\n| policy | predicted TTFT p50 | p90 | p99 | measured TTFT p50 | p90 | p99 | failed | pods' prefix hit rate | follow-ups on their pod (gateway knew the pod) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    for row in rows {
        let (p, m) = (&row.predicted.ttft_ms, &row.measured.ttft_ms);
        let FollowUps { served, on_pod, pod_known } = row.follow_ups;
        let percent = |n: usize| 100.0 * n as f64 / served as f64;
        let share = match pod_known {
            _ if served == 0 => "-".into(),
            Some(known) => format!("{:.1}% of {served} ({:.1}%)", percent(on_pod), percent(known)),
            None => format!("{:.1}% of {served}", percent(on_pod)),
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {:.1}% | {share} |",
            row.label(),
            p.p50,
            p.p90,
            p.p99,
            m.p50,
            m.p90,
            m.p99,
            row.measured.failed,
            100.0 * row.measured.prefix_hit_rate
        );
    }
    let get = |name: &str| rows.iter().find(|r| r.policy == name && r.replicas == 1);
    if let (Some(ours), Some(rr)) = (get("infergate"), get("round_robin")) {
        let predicted = reduction(ours.predicted.ttft_ms.p90, rr.predicted.ttft_ms.p90);
        let measured = reduction(ours.measured.ttft_ms.p90, rr.measured.ttft_ms.p90);
        let _ = writeln!(
            out,
            "\nTTFT p90 reduction against round robin: predicted {predicted:.1}%, measured {measured:.1}% ({:.1} points apart; target: within 10).",
            (predicted - measured).abs()
        );
    }
    out
}

/// Over several request sets: each policy's TTFT p90 and p99, measured against
/// predicted, set by set, and in how many sets they meet part 2's targets (measured
/// p99 ≤ 2× predicted, p90 within 25%).
pub fn e2e_sets_markdown(described: &str, rows: &[E2eRow]) -> String {
    let mut out = format!(
        "\n### {described}: every request set\n\n| policy | requests measured | sets | measured p99 per set (predicted) | p99 ≤ 2× predicted | p90 within 25% of predicted |\n|---|---:|---:|---|---:|---:|\n"
    );
    let mut labels: Vec<String> = rows.iter().map(E2eRow::label).collect();
    labels.sort();
    labels.dedup();
    for label in labels {
        let mine: Vec<&E2eRow> = rows.iter().filter(|r| r.label() == label).collect();
        let requests: usize = mine.iter().map(|r| r.measured.requests).sum();
        let per_set: Vec<String> =
            mine.iter().map(|r| format!("{:.0} ({:.0})", r.measured.ttft_ms.p99, r.predicted.ttft_ms.p99)).collect();
        let tail_met = mine.iter().filter(|r| r.measured.ttft_ms.p99 <= 2.0 * r.predicted.ttft_ms.p99).count();
        let p90_met = mine
            .iter()
            .filter(|r| (r.measured.ttft_ms.p90 - r.predicted.ttft_ms.p90).abs() <= 0.25 * r.predicted.ttft_ms.p90)
            .count();
        let _ = writeln!(
            out,
            "| {label} | {requests} | {} | {} | {tail_met} of {} | {p90_met} of {} |",
            mine.len(),
            per_set.join(", "),
            mine.len(),
            mine.len()
        );
    }
    out
}

/// Part 2's chart for one workload at `load` (its load step): each run's measured TTFT
/// p99, the worst of its request sets, as `e2e-ttft-p99-<workload>.{svg,png}` in `out`.
pub fn e2e_tail_chart(out: &Path, workload: &str, load: f64, sets: u64, rows: &[E2eRow]) -> Result<(), String> {
    let runs: Vec<(String, f64)> = rows.iter().map(|row| (row.label(), row.measured.ttft_ms.p99)).collect();
    write_e2e_tail_chart(out, workload, load, sets, &runs)
}

/// [`e2e_tail_chart`] from each run's label and measured TTFT p99 per request set, as a
/// saved report holds them (`examples/e2e_chart.rs` redraws one).
pub fn write_e2e_tail_chart(
    out: &Path,
    workload: &str,
    load: f64,
    sets: u64,
    runs: &[(String, f64)],
) -> Result<(), String> {
    let mut bars: Vec<(String, f64)> = Vec::new();
    for (label, p99) in runs {
        match bars.iter_mut().find(|(seen, _)| seen == label) {
            Some((_, worst)) => *worst = worst.max(*p99),
            None => bars.push((label.clone(), *p99)),
        }
    }
    let of_sets = if sets == 1 { String::new() } else { format!(", worst of {sets} request sets") };
    let at = super::charts::load_short(workload, load);
    let title = format!("{workload} at {at} through Envoy: TTFT p99{of_sets}");
    let chart = Bars { title: &title, metric: "measured TTFT p99", unit: Unit::Millis, bars: &bars };
    super::bars::write_bars(out, &format!("e2e-ttft-p99-{workload}"), &chart)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Percentiles;

    fn result(requests: usize, p90: f64, p99: f64) -> RunResult {
        RunResult {
            requests,
            failed: 0,
            ttft_ms: Percentiles { mean: 0.0, p50: 0.0, p90, p99 },
            tpot_p90_ms: 0.0,
            e2e_p90_ms: 0.0,
            output_tokens_per_s: 0.0,
            prefix_hit_rate: 0.0,
            lora_loads: 0,
            load_imbalance_cv: 0.0,
            calibration: None,
            prefix_belief: None,
        }
    }

    fn row(request_set: u64, predicted: (f64, f64), measured: (f64, f64)) -> E2eRow {
        E2eRow {
            policy: "infergate".into(),
            replicas: 1,
            request_set,
            predicted: result(400, predicted.0, predicted.1),
            measured: result(400, measured.0, measured.1),
            follow_ups: FollowUps::default(),
        }
    }

    #[test]
    fn the_tail_chart_shows_each_runs_worst_set() {
        let dir = std::env::temp_dir().join(format!("infergate-e2e-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let mut rows = vec![row(0, (100.0, 280.0), (110.0, 500.0)), row(1, (100.0, 280.0), (110.0, 9000.0))];
        rows.push(E2eRow { policy: "round_robin".into(), ..row(0, (1.0, 1.0), (1.0, 7000.0)) });
        e2e_tail_chart(&dir, "bursty-chat", 9.6, 2, &rows).unwrap_or_default();
        let svg = std::fs::read_to_string(dir.join("e2e-ttft-p99-bursty-chat.svg")).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        // plotters writes each text on a line of its own.
        let has = |text: &str| svg.contains(&format!("\n{text}\n"));
        assert!(has("bursty-chat at 9.6 req/s through Envoy: TTFT p99, worst of 2 request sets"), "{svg}");
        assert!(has("infergate") && has("round_robin"), "{svg}");
        // infergate's two sets are one bar at its worst set, labelled with its value.
        assert!(has("9,000 ms") && has("7,000 ms") && !has("500 ms"), "{svg}");
    }

    #[test]
    fn the_sets_table_counts_each_set_against_its_own_prediction() {
        let rows = [
            row(0, (100.0, 280.0), (110.0, 500.0)),   // p99 within 2×, p90 within 25%
            row(1, (100.0, 5000.0), (130.0, 9000.0)), // p99 within 2×, p90 30% over
            row(2, (100.0, 200.0), (90.0, 4000.0)),   // p99 20× over
        ];
        let table = e2e_sets_markdown("bursty-chat", &rows);
        let line = table.lines().find(|l| l.starts_with("| infergate |")).unwrap_or_default();
        assert_eq!(line, "| infergate | 1200 | 3 | 500 (280), 9000 (5000), 4000 (200) | 2 of 3 | 2 of 3 |", "{table}");
    }
}
