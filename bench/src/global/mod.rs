//! Tier 2 in the discrete-event simulator: two regions' clusters, each a tier-1 fleet
//! routed by the router the filter ships, and in front of them either the global
//! router's ranking (`rank_clusters` over `summarize`d snapshots, the code the filter
//! and the agent run) or round robin across clusters.

mod chart;
mod policies;
mod workload;

pub use chart::chart;
pub use policies::{CROSS_REGION_RTT_MS, Clusters, GlobalLayer, Layer};
pub use workload::{Region, Tags, TwoRegions};

use infergate_core::wire::CHARS_PER_TOKEN;

use crate::results::{RequestOutcome, RunResult};
use crate::workloads::Scenario;

/// What the global benchmark reports for one policy.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GlobalResult {
    pub policy: String,
    pub latency_ttft_p90_ms: f64,
    pub batch_ttft_p90_ms: f64,
    /// Of the requests sent, the share refused (sheddable batch requests).
    pub shed_rate: f64,
    /// Tokens served (prompt and output) per cluster, priced at its cost.
    pub cost_per_million_tokens: f64,
    /// Share of east's latency requests served in the west (they pay the round trip).
    pub east_latency_served_west: f64,
    pub requests: usize,
}

/// Aggregates one run's outcomes by class, cluster and origin.
pub fn summarize_run(
    policy: &str,
    scenario: &Scenario,
    tags: &[Tags],
    clusters: &Clusters,
    outcomes: &[RequestOutcome],
) -> GlobalResult {
    let (mut latency, mut batch) = (Vec::new(), Vec::new());
    let (mut cost, mut tokens, mut shed, mut sent) = (0.0, 0.0, 0usize, 0usize);
    let (mut east_latency, mut east_latency_west) = (0usize, 0usize);
    for ((outcome, tag), request) in outcomes.iter().zip(tags).zip(&scenario.requests) {
        if outcome.not_sent {
            continue;
        }
        sent += 1;
        if outcome.shed {
            shed += 1;
            continue;
        }
        let cluster = clusters.of_pod(outcome.pod);
        let away = cluster != tag.origin.index();
        // A request served in the other region waits the round trip for its first token.
        let seen = RequestOutcome {
            first_token: outcome.first_token.map(|t| t + if away { CROSS_REGION_RTT_MS / 1000.0 } else { 0.0 }),
            ..*outcome
        };
        if tag.batch {
            batch.push(seen)
        } else {
            latency.push(seen)
        }
        let served = (request.prompt.len() as f64 / CHARS_PER_TOKEN as f64) + f64::from(request.output_tokens);
        cost += served * clusters.cost(cluster);
        tokens += served;
        if tag.origin == Region::East && !tag.batch {
            east_latency += 1;
            east_latency_west += usize::from(away);
        }
    }
    GlobalResult {
        policy: policy.to_string(),
        latency_ttft_p90_ms: RunResult::from_outcomes(&latency).ttft_ms.p90,
        batch_ttft_p90_ms: RunResult::from_outcomes(&batch).ttft_ms.p90,
        shed_rate: if sent > 0 { shed as f64 / sent as f64 } else { 0.0 },
        cost_per_million_tokens: if tokens > 0.0 { cost / tokens } else { 0.0 },
        east_latency_served_west: if east_latency > 0 { east_latency_west as f64 / east_latency as f64 } else { 0.0 },
        requests: sent,
    }
}

/// The results as a Markdown table.
pub fn markdown(results: &[GlobalResult]) -> String {
    let mut out = String::from(
        "| policy | latency TTFT p90 (ms) | batch TTFT p90 (ms) | shed rate | cost per 1M tokens | east latency served west | requests |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        out.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.1}% | {:.3} | {:.1}% | {} |\n",
            r.policy,
            r.latency_ttft_p90_ms,
            r.batch_ttft_p90_ms,
            r.shed_rate * 100.0,
            r.cost_per_million_tokens,
            r.east_latency_served_west * 100.0,
            r.requests
        ));
    }
    out
}
