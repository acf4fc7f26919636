//! Part 2's table: end-to-end through Envoy beside the discrete-event prediction.

use std::fmt::Write;

use serde::Serialize;

use crate::results::RunResult;

#[derive(Debug, Clone, Serialize)]
pub struct E2eRow {
    pub policy: String,
    /// The discrete-event run of the same requests.
    pub predicted: RunResult,
    /// Through real Envoy, at the client.
    pub measured: RunResult,
}

fn reduction(ours: f64, baseline: f64) -> f64 {
    if baseline > 0.0 { 100.0 * (1.0 - ours / baseline) } else { 0.0 }
}

pub fn e2e_markdown(rows: &[E2eRow], requests: usize, time_scale: f64) -> String {
    let mut out = format!(
        "\n## Part 2: end to end through Envoy\n\n`bursty-chat` scaled down (4 pods, {requests} requests generated, bursts of 5 s every 15 s over 30 s), pods {time_scale}× slower than the engine model with arrivals stretched alike; times below are in simulated milliseconds. TTFT is the first SSE chunk at the client.\n\n| policy | predicted TTFT p50 | p90 | p99 | measured TTFT p50 | p90 | p99 | failed |\n|---|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    for row in rows {
        let (p, m) = (&row.predicted.ttft_ms, &row.measured.ttft_ms);
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
            row.policy, p.p50, p.p90, p.p99, m.p50, m.p90, m.p99, row.measured.failed
        );
    }
    let get = |name: &str| rows.iter().find(|r| r.policy == name);
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
