//! `make bench-peers`: infergate in real Envoy beside the peers' own routers, each run
//! as a gateway of its own in front of fresh pods, on the same requests at the same
//! times. Part 2 runs model-sim pods (the workloads of part 2 and the agentic
//! sessions); part 3 real vLLM pods on CPU under inference-perf (`engine_runs`). One
//! schema for both, `results.json`, in [`PeerResults`].

pub mod report;

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use infergate_envoy_config::UpstreamPolicy;
use infergate_harness::peer_router::PeerRouter;

use crate::provenance::Provenance;
use crate::results::{Percentiles, RunResult};

/// Every gateway the bench can run, by its results name, in report order: infergate,
/// the real peers, then Envoy's own policies.
pub const GATEWAYS: [&str; 8] = [
    "infergate",
    "smg_cache_aware",
    "smg_prefix_hash",
    "vllm_router_cache_aware",
    "vllm_router_sticky",
    "vllm_router_kv_aware",
    "round_robin",
    "least_request",
];

/// What serves a run's requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gateway {
    /// Real Envoy: with infergate's filter and agent, or one of Envoy's own policies.
    Envoy(UpstreamPolicy),
    /// A peer's own router; `kv_aware` gets its event sources when the pods exist.
    Peer(PeerRouterKind),
}

/// The peer routers before their pods are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRouterKind {
    SmgCacheAware,
    SmgPrefixHash,
    VllmRouterCacheAware,
    VllmRouterSticky,
    VllmRouterKvAware,
}

impl PeerRouterKind {
    /// The router for pods without KV events; `None` for `kv_aware`, which needs them.
    pub fn without_kv_events(self) -> Option<PeerRouter> {
        self.router(&[], 0, None)
    }

    /// The router in front of pods publishing their KV events at `kv_events` (one per
    /// pod, none for pods that publish none) in blocks of `block_size` tokens; `kv_aware`
    /// binds sessions for `session_ttl_s` when set. `None` for `kv_aware` without events.
    pub fn router(
        self,
        kv_events: &[(SocketAddr, String)],
        block_size: u32,
        session_ttl_s: Option<u64>,
    ) -> Option<PeerRouter> {
        Some(match self {
            PeerRouterKind::SmgCacheAware => PeerRouter::SmgCacheAware,
            PeerRouterKind::SmgPrefixHash => PeerRouter::SmgPrefixHash,
            PeerRouterKind::VllmRouterCacheAware => PeerRouter::VllmRouterCacheAware,
            PeerRouterKind::VllmRouterSticky => PeerRouter::VllmRouterSticky,
            PeerRouterKind::VllmRouterKvAware if kv_events.is_empty() => return None,
            PeerRouterKind::VllmRouterKvAware => {
                PeerRouter::VllmRouterKvAware { kv_events: kv_events.to_vec(), block_size, session_ttl_s }
            }
        })
    }
}

impl Gateway {
    /// The gateway of results name `name`.
    pub fn named(name: &str) -> Option<Gateway> {
        Some(match name {
            "infergate" => Gateway::Envoy(UpstreamPolicy::Infergate),
            "round_robin" => Gateway::Envoy(UpstreamPolicy::RoundRobin),
            "least_request" => Gateway::Envoy(UpstreamPolicy::LeastRequest),
            "smg_cache_aware" => Gateway::Peer(PeerRouterKind::SmgCacheAware),
            "smg_prefix_hash" => Gateway::Peer(PeerRouterKind::SmgPrefixHash),
            "vllm_router_cache_aware" => Gateway::Peer(PeerRouterKind::VllmRouterCacheAware),
            "vllm_router_sticky" => Gateway::Peer(PeerRouterKind::VllmRouterSticky),
            "vllm_router_kv_aware" => Gateway::Peer(PeerRouterKind::VllmRouterKvAware),
            _ => return None,
        })
    }

    /// Whether this is one of the peers' real routers (not infergate, not Envoy's own).
    pub fn is_real_peer(name: &str) -> bool {
        matches!(Gateway::named(name), Some(Gateway::Peer(_)))
    }
}

/// One gateway on one workload at one load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerRun {
    /// 2: model-sim pods; 3: real vLLM pods.
    pub part: u8,
    pub workload: String,
    /// In the workload's own unit: req/s, sessions at once, × a trace's rate.
    pub load: f64,
    pub gateway: String,
    pub ttft_ms: Percentiles,
    /// Sent (answered or failed).
    pub requests: usize,
    pub failed: usize,
    /// The engines' own prefix-cache hits over queries, from their metrics.
    pub prefix_hit_rate: f64,
    pub pods: usize,
}

impl PeerRun {
    pub fn of(part: u8, workload: &str, load: f64, gateway: &str, pods: usize, result: &RunResult) -> Self {
        Self {
            part,
            workload: workload.to_string(),
            load,
            gateway: gateway.to_string(),
            ttft_ms: result.ttft_ms,
            requests: result.requests,
            failed: result.failed,
            prefix_hit_rate: result.prefix_hit_rate,
            pods,
        }
    }
}

impl PeerRun {
    /// A part-3 run: inference-perf's own TTFT, the engines' own hit rate.
    pub fn of_engines(run: &crate::engine_runs::EngineRun, workload: &str, load: f64, pods: usize) -> Self {
        let ttft = run.summary.ttft_ms;
        Self {
            part: 3,
            workload: workload.to_string(),
            load,
            gateway: run.policy.to_string(),
            ttft_ms: Percentiles { mean: ttft.mean, p50: ttft.p50, p90: ttft.p90, p99: ttft.p99 },
            requests: run.summary.sent as usize,
            failed: run.summary.failed as usize,
            prefix_hit_rate: run.counters.hit_rate().unwrap_or(0.0),
            pods,
        }
    }
}

/// `results.json`: where it came from, and every run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerResults {
    /// The run that wrote the file last.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// Where each part's runs came from: a run of one part keeps the other's.
    #[serde(default)]
    pub parts: Vec<PartProvenance>,
    /// The peers' versions, as installed.
    pub peers: Vec<String>,
    pub runs: Vec<PeerRun>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartProvenance {
    pub part: u8,
    #[serde(flatten)]
    pub provenance: Provenance,
}

impl PeerResults {
    /// A new file for a run of `parts`, keeping from `earlier` (the file as it was) the
    /// runs and provenance of every other part.
    pub fn for_parts(parts: &[u8], here: Provenance, peers: Vec<String>, earlier: Option<PeerResults>) -> Self {
        let (mut kept_parts, runs) = match earlier {
            Some(earlier) => {
                // A file from before `parts` was written: its one provenance is each part's.
                let mut earlier_parts = earlier.parts;
                if earlier_parts.is_empty() {
                    let mut seen: Vec<u8> = earlier.runs.iter().map(|r| r.part).collect();
                    seen.dedup();
                    earlier_parts = seen
                        .into_iter()
                        .map(|part| PartProvenance { part, provenance: earlier.provenance.clone() })
                        .collect();
                }
                (
                    earlier_parts.into_iter().filter(|p| !parts.contains(&p.part)).collect::<Vec<_>>(),
                    earlier.runs.into_iter().filter(|r| !parts.contains(&r.part)).collect(),
                )
            }
            None => (Vec::new(), Vec::new()),
        };
        kept_parts.extend(parts.iter().map(|&part| PartProvenance { part, provenance: here.clone() }));
        kept_parts.sort_by_key(|p| p.part);
        Self { provenance: here, parts: kept_parts, peers, runs }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_gateway_name_is_known_and_only_the_routers_are_real_peers() {
        for name in GATEWAYS {
            assert!(Gateway::named(name).is_some(), "{name}");
        }
        let real: Vec<&str> = GATEWAYS.into_iter().filter(|n| Gateway::is_real_peer(n)).collect();
        assert_eq!(real.len(), 5);
        assert!(!Gateway::is_real_peer("infergate") && !Gateway::is_real_peer("round_robin"));
    }

    #[test]
    fn the_results_file_has_the_schema_the_issue_names() {
        let results = PeerResults {
            provenance: Provenance {
                commit: "abc".into(),
                dirty: false,
                date: "2026-12-08T00:00:00Z".into(),
                command: "peers".into(),
                cores: 2,
            },
            parts: Vec::new(),
            peers: vec!["smg 1.13.0".into()],
            runs: vec![PeerRun {
                part: 2,
                workload: "agentic".into(),
                load: 16.0,
                gateway: "infergate".into(),
                ttft_ms: Percentiles { mean: 4.0, p50: 1.0, p90: 2.0, p99: 3.0 },
                requests: 10,
                failed: 1,
                prefix_hit_rate: 0.5,
                pods: 8,
            }],
        };
        let json: serde_json::Value = serde_json::to_value(&results).expect("serializes");
        assert_eq!(json["commit"], "abc");
        let run = &json["runs"][0];
        for field in ["workload", "load", "gateway", "requests", "failed", "prefix_hit_rate"] {
            assert!(!run[field].is_null(), "{field}");
        }
        for p in ["p50", "p90", "p99", "mean"] {
            assert!(run["ttft_ms"][p].is_number(), "{p}");
        }
        let back: PeerResults = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, results);
    }

    #[test]
    fn a_run_of_one_part_keeps_the_others_runs() {
        let at = |commit: &str| Provenance {
            commit: commit.into(),
            dirty: false,
            date: String::new(),
            command: String::new(),
            cores: 2,
        };
        let run = |part| PeerRun {
            part,
            workload: "w".into(),
            load: 1.0,
            gateway: "infergate".into(),
            ttft_ms: Percentiles::default(),
            requests: 1,
            failed: 0,
            prefix_hit_rate: 0.0,
            pods: 1,
        };
        let both = PeerResults::for_parts(&[2, 3], at("a"), Vec::new(), None);
        let both = PeerResults { runs: vec![run(2), run(3)], ..both };
        let again = PeerResults::for_parts(&[3], at("b"), Vec::new(), Some(both));
        assert_eq!(again.runs, vec![run(2)], "part 3 is being rerun; part 2's run stays");
        let commits: Vec<(u8, &str)> = again.parts.iter().map(|p| (p.part, p.provenance.commit.as_str())).collect();
        assert_eq!(commits, [(2, "a"), (3, "b")]);
    }
}
