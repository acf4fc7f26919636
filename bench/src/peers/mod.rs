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

/// How long vllm-router's `kv_aware` keeps a session on its pod where the workload
/// has sessions (`--kv-aware-session-affinity-ttl-secs`; off by default, on here as
/// the peers bench asks): past the longest think time the workloads play.
pub const KV_AWARE_SESSION_TTL_S: u64 = 300;

impl PeerRouterKind {
    /// Whether it routes on the pods' KV events, which their pods must then publish.
    pub fn needs_kv_events(self) -> bool {
        self == PeerRouterKind::VllmRouterKvAware
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
    /// The commit the run was made at (short).
    #[serde(default)]
    pub commit: String,
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
            commit: String::new(),
        }
    }

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
            commit: String::new(),
        }
    }
}

/// `results.json`: where the last run came from, and every run kept, each naming the
/// commit it was made at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerResults {
    /// The run that wrote the file last.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// The peers' versions, as installed.
    pub peers: Vec<String>,
    pub runs: Vec<PeerRun>,
}

impl PeerResults {
    /// The file of a new run, keeping every run of `earlier` (the file as it was): a run
    /// of some gateways or workloads replaces only those ([`PeerResults::add`]).
    pub fn carrying(here: Provenance, peers: Vec<String>, earlier: Option<PeerResults>) -> Self {
        let runs = earlier.map_or_else(Vec::new, |earlier| {
            // A file from before runs named their commit: the file's commit is theirs.
            let commit = short(&earlier.provenance.commit);
            earlier
                .runs
                .into_iter()
                .map(|run| if run.commit.is_empty() { PeerRun { commit: commit.clone(), ..run } } else { run })
                .collect()
        });
        Self { provenance: here, peers, runs }
    }

    /// Adds `run`, made at this file's commit, in place of an earlier run of the same
    /// part, workload, load and gateway.
    pub fn add(&mut self, run: PeerRun) {
        let run = PeerRun { commit: short(&self.provenance.commit), ..run };
        let same = |r: &PeerRun| {
            (r.part, &r.workload, r.load, &r.gateway) == (run.part, &run.workload, run.load, &run.gateway)
        };
        match self.runs.iter_mut().find(|r| same(r)) {
            Some(slot) => *slot = run,
            None => self.runs.push(run),
        }
    }

    /// The commits the runs were made at, each with how many, in first-seen order.
    pub fn commits(&self) -> Vec<(String, usize)> {
        let mut seen: Vec<(String, usize)> = Vec::new();
        for run in &self.runs {
            match seen.iter_mut().find(|(commit, _)| *commit == run.commit) {
                Some((_, count)) => *count += 1,
                None => seen.push((run.commit.clone(), 1)),
            }
        }
        seen
    }
}

fn short(commit: &str) -> String {
    commit.get(..7).unwrap_or(commit).to_string()
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
                commit: "abc".into(),
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
    fn a_rerun_replaces_only_what_it_ran_and_each_run_names_its_commit() {
        let at = |commit: &str| Provenance {
            commit: commit.into(),
            dirty: false,
            date: String::new(),
            command: String::new(),
            cores: 2,
        };
        let run = |gateway: &str, p90: f64| PeerRun {
            part: 2,
            workload: "w".into(),
            load: 1.0,
            gateway: gateway.into(),
            ttft_ms: Percentiles { p90, ..Percentiles::default() },
            requests: 1,
            failed: 0,
            prefix_hit_rate: 0.0,
            pods: 1,
            commit: String::new(),
        };
        let mut first = PeerResults::carrying(at("aaaaaaa1"), Vec::new(), None);
        first.add(run("infergate", 1.0));
        first.add(run("smg_cache_aware", 2.0));
        let mut again = PeerResults::carrying(at("bbbbbbb2"), Vec::new(), Some(first));
        again.add(run("smg_cache_aware", 3.0));
        let kept: Vec<(&str, f64, &str)> =
            again.runs.iter().map(|r| (r.gateway.as_str(), r.ttft_ms.p90, r.commit.as_str())).collect();
        assert_eq!(kept, [("infergate", 1.0, "aaaaaaa"), ("smg_cache_aware", 3.0, "bbbbbbb")]);
        assert_eq!(again.commits(), [("aaaaaaa".to_string(), 1), ("bbbbbbb".to_string(), 1)]);
    }
}
