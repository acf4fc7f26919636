//! Part 2's table: end-to-end through Envoy beside the discrete-event prediction.

use std::fmt::Write;

use serde::Serialize;

use crate::results::RunResult;

#[derive(Debug, Clone, Serialize)]
pub struct E2eRow {
    pub policy: String,
    /// Gateway replicas (separate Envoys) the client spread the requests over.
    pub replicas: usize,
    /// The discrete-event run of the same requests.
    pub predicted: RunResult,
    /// Through real Envoy, at the client; the prefix hit rate is the pods' own.
    pub measured: RunResult,
    /// Follow-up turns served by their previous turn's pod, of those served.
    pub follow_ups_on_pod: (usize, usize),
}

impl E2eRow {
    fn label(&self) -> String {
        match self.replicas {
            1 => self.policy.clone(),
            n => format!("{}, {n} replicas", self.policy),
        }
    }
}

fn reduction(ours: f64, baseline: f64) -> f64 {
    if baseline > 0.0 { 100.0 * (1.0 - ours / baseline) } else { 0.0 }
}

/// One workload's table; `described` says what the workload is.
pub fn e2e_markdown(described: &str, rows: &[E2eRow], requests: usize, time_scale: f64) -> String {
    let mut out = format!(
        "\n### {described}\n\n{requests} requests generated; pods {time_scale}× slower than the engine model with arrivals stretched alike; times below are in simulated milliseconds. TTFT is the first SSE chunk at the client. With several replicas, consecutive turns of a conversation go to different replicas.\n\n| policy | predicted TTFT p50 | p90 | p99 | measured TTFT p50 | p90 | p99 | failed | pods' prefix hit rate | follow-ups on their pod |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    for row in rows {
        let (p, m) = (&row.predicted.ttft_ms, &row.measured.ttft_ms);
        let (same, all) = row.follow_ups_on_pod;
        let share = if all > 0 { format!("{:.1}% of {all}", 100.0 * same as f64 / all as f64) } else { "-".into() };
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
