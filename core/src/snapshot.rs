//! The snapshot the metrics agent pushes to every Envoy: the routing config plus what
//! each pod last reported. One definition serves the agent (encode) and the filter
//! (decode); it travels as MessagePack with named fields so that fields can be added.
//!
//! The routing config inside travels as JSON text: the filter already reads the same
//! types from JSON in its plugin configuration, and a second, MessagePack, instance of
//! every config type's deserializer would double the largest part of the `.wasm`.

use serde::{Deserialize, Serialize};

use crate::config::{PodRole, RoutingConfig};
use crate::endpoint::Endpoint;
use crate::replicas::{DigestError, ReplicaDigest};

/// Bumped on any change a reader of the previous version would misread.
/// Version 3: `waiting`, `running` and `kv_cache_usage` became optional (unknown when
/// the engine's release does not export them); a version-2 reader would take an absent
/// value for a decode error.
pub const SNAPSHOT_VERSION: u32 = 3;
/// Largest snapshot the control listener accepts.
pub const MAX_SNAPSHOT_BYTES: usize = 4 * 1024 * 1024;
const MAX_PODS_PER_POOL: usize = 4096;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub version: u32,
    /// Increases with every snapshot an agent builds.
    pub sequence: u64,
    /// Unix time in milliseconds when the agent built it.
    pub created_at_ms: u64,
    #[serde(with = "routing_as_json")]
    pub routing: RoutingConfig,
    pub pools: Vec<PoolState>,
    /// The other gateway replicas' prefix records and load since this replica's last
    /// snapshot (active-active, [`crate::replicas`]); empty with one replica.
    #[serde(default)]
    pub peers: ReplicaDigest,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolState {
    pub name: String,
    pub pods: Vec<PodState>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PodState {
    pub address: Endpoint,
    /// False when discovery says the pod is not ready; such a pod is never chosen.
    pub ready: bool,
    /// What the pod does in a disaggregated pool (`both` elsewhere), from the pool's
    /// static lists or its role label. Absent in an older agent's snapshot: `both`.
    #[serde(default)]
    pub role: PodRole,
    /// Unix ms of the last successful scrape, absent if none succeeded yet.
    pub scraped_at_ms: Option<u64>,
    /// What the last successful scrape said, absent if none succeeded yet.
    pub signals: Option<PodSignals>,
}

impl PodState {
    /// A ready pod whose scrape at `scraped_at_ms` said `signals`.
    pub fn scraped(address: Endpoint, scraped_at_ms: u64, signals: PodSignals) -> Self {
        Self { address, ready: true, role: PodRole::Both, scraped_at_ms: Some(scraped_at_ms), signals: Some(signals) }
    }
}

/// An engine's metrics, normalized across engines. A signal the engine's release does
/// not export is `None`: unknown, which the router fills from its own in-flight counts,
/// never zero.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodSignals {
    /// Requests waiting for admission (vLLM `num_requests_waiting`).
    #[serde(default)]
    pub waiting: Option<f64>,
    /// Requests in the running batch.
    #[serde(default)]
    pub running: Option<f64>,
    /// KV-cache use, 0..=1.
    #[serde(default)]
    pub kv_cache_usage: Option<f64>,
    /// Adapters of running requests. With `max_loras` absent, the engine does not
    /// report adapters at all and empty lists mean unknown, not "none loaded".
    #[serde(default)]
    pub running_adapters: Vec<String>,
    #[serde(default)]
    pub waiting_adapters: Vec<String>,
    #[serde(default)]
    pub max_loras: Option<u32>,
    #[serde(default)]
    pub block_size: Option<u32>,
    #[serde(default)]
    pub num_gpu_blocks: Option<u64>,
    /// Uncached prompt tokens prefilled per second, learned from the pod's counters.
    #[serde(default)]
    pub prefill_tokens_per_s: Option<f64>,
    /// Mean time of one engine step (inter-token latency), learned likewise.
    #[serde(default)]
    pub decode_step_ms: Option<f64>,
    /// Mean uncached prompt tokens per request, learned likewise.
    #[serde(default)]
    pub mean_prompt_tokens: Option<f64>,
    /// Requests the pod starts per second, learned likewise.
    #[serde(default)]
    pub request_rate_per_s: Option<f64>,
    /// How long a request holds a batch slot, prefill and decode, learned likewise.
    #[serde(default)]
    pub slot_hold_ms: Option<f64>,
    /// The pod's own counts of prompt tokens looked up in its prefix cache and found
    /// there, since it started (vLLM `prefix_cache_queries` and `prefix_cache_hits`, in
    /// blocks before 0.9.2; SGLang's prompt and cached tokens): what the router's prefix
    /// index is checked against (`router::cache_truth`). Only their ratio over an
    /// interval is read, so the unit does not matter.
    #[serde(default)]
    pub prefix_cache_queries: Option<f64>,
    #[serde(default)]
    pub prefix_cache_hits: Option<f64>,
    /// The config's LoRA adapters of the pod's pool that its `/v1/models` lists (read
    /// every few seconds): a pod that does not list an adapter answers a request for
    /// it 404. `None` when not read: the pool declares no adapters, or the engine
    /// serves no list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_adapters: Option<Vec<String>>,
}

impl PodSignals {
    /// The LoRA slots the listed adapters hold or claim: one per running adapter, and
    /// one per adapter that only waiting requests use (it loads before any adapter
    /// asked for after it). Idle resident adapters are not listed by vLLM; their
    /// slots count as free, since evicting one costs no more than an empty slot.
    pub fn claimed_lora_slots(&self) -> usize {
        let running = &self.running_adapters;
        running.len() + self.waiting_adapters.iter().filter(|a| !running.contains(a)).count()
    }

    /// Whether the pod's model list has `adapter`; `None` when it was not read.
    pub fn serves_adapter(&self, adapter: &str) -> Option<bool> {
        self.served_adapters.as_ref().map(|list| list.iter().any(|a| a == adapter))
    }

    /// Whether the pod lists `adapter` among its running or waiting requests' adapters.
    pub fn lists_adapter(&self, adapter: &str) -> bool {
        self.running_adapters.iter().chain(&self.waiting_adapters).any(|a| a == adapter)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("snapshot is not valid MessagePack for this schema: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    #[error("snapshot version {found} is not supported; this build reads version {SNAPSHOT_VERSION}")]
    Version { found: u32 },
    #[error("snapshot routing config is invalid: {0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("snapshot pool {pool:?} has {count} pods, more than the limit of {MAX_PODS_PER_POOL}")]
    TooManyPods { pool: String, count: usize },
    #[error("snapshot pod {address} has a signal that is not a finite, non-negative number")]
    BadSignal { address: Endpoint },
    #[error("snapshot peers: {0}")]
    Peers(#[from] DigestError),
}

#[derive(Deserialize)]
struct VersionOnly {
    version: u32,
}

/// The routing config as a JSON string field.
mod routing_as_json {
    use serde::de::Error as _;
    use serde::ser::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::config::RoutingConfig;

    pub fn serialize<S: Serializer>(config: &RoutingConfig, serializer: S) -> Result<S::Ok, S::Error> {
        let text = serde_json::to_string(config).map_err(S::Error::custom)?;
        serializer.serialize_str(&text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<RoutingConfig, D::Error> {
        let text = <&str>::deserialize(deserializer)?;
        // `from_slice`, as the plugin configuration is read: one reader type means one
        // copy of the config's deserializers in the `.wasm`.
        serde_json::from_slice(text.as_bytes()).map_err(|err| D::Error::custom(format!("routing: {err}")))
    }
}

impl Snapshot {
    pub fn encode(&self) -> Result<Vec<u8>, rmp_serde::encode::Error> {
        rmp_serde::to_vec_named(self)
    }

    /// Decodes and validates untrusted bytes; nothing unchecked reaches the router.
    pub fn decode(bytes: &[u8]) -> Result<Self, SnapshotError> {
        if bytes.len() > MAX_SNAPSHOT_BYTES {
            return Err(SnapshotError::TooLarge { size: bytes.len(), limit: MAX_SNAPSHOT_BYTES });
        }
        let snapshot: Snapshot = rmp_serde::from_slice(bytes).map_err(|err| {
            // A snapshot of another version may not even parse: say so rather than
            // report the first field that differs.
            match rmp_serde::from_slice::<VersionOnly>(bytes) {
                Ok(VersionOnly { version }) if version != SNAPSHOT_VERSION => SnapshotError::Version { found: version },
                _ => SnapshotError::Decode(err),
            }
        })?;
        snapshot.check()?;
        Ok(snapshot)
    }

    fn check(&self) -> Result<(), SnapshotError> {
        if self.version != SNAPSHOT_VERSION {
            return Err(SnapshotError::Version { found: self.version });
        }
        self.routing.validate()?;
        self.peers.check()?;
        for pool in &self.pools {
            if pool.pods.len() > MAX_PODS_PER_POOL {
                return Err(SnapshotError::TooManyPods { pool: pool.name.clone(), count: pool.pods.len() });
            }
            for pod in &pool.pods {
                if let Some(s) = &pod.signals {
                    let sane = |v: Option<f64>| v.is_none_or(|v| v.is_finite() && v >= 0.0);
                    let counters = sane(s.prefix_cache_queries) && sane(s.prefix_cache_hits);
                    if !(sane(s.waiting) && sane(s.running) && sane(s.kv_cache_usage) && counters) {
                        return Err(SnapshotError::BadSignal { address: pod.address });
                    }
                }
            }
        }
        Ok(())
    }

    pub fn pool(&self, name: &str) -> Option<&PoolState> {
        self.pools.iter().find(|p| p.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Snapshot {
        let address: Endpoint = "127.0.0.1:8001".parse().unwrap();
        Snapshot {
            version: SNAPSHOT_VERSION,
            sequence: 7,
            created_at_ms: 1_700_000_000_000,
            routing: RoutingConfig::single_pool("a", vec![address], "m"),
            pools: vec![PoolState {
                name: "a".into(),
                pods: vec![PodState {
                    address,
                    ready: true,
                    role: Default::default(),
                    scraped_at_ms: Some(1_700_000_000_000),
                    signals: Some(PodSignals {
                        waiting: Some(2.0),
                        running: Some(3.0),
                        kv_cache_usage: Some(0.5),
                        running_adapters: vec!["sql-lora".into()],
                        ..Default::default()
                    }),
                }],
            }],
            peers: Default::default(),
        }
    }

    #[test]
    fn messagepack_round_trip() {
        let snapshot = sample();
        let bytes = snapshot.encode().unwrap();
        assert_eq!(Snapshot::decode(&bytes).unwrap(), snapshot);
    }

    #[test]
    fn garbage_is_refused() {
        assert!(matches!(Snapshot::decode(b"\xc1garbage"), Err(SnapshotError::Decode(_))));
        assert!(Snapshot::decode(&[]).is_err());
    }

    #[test]
    fn wrong_version_is_refused() {
        let mut snapshot = sample();
        snapshot.version = 99;
        let err = Snapshot::decode(&snapshot.encode().unwrap()).unwrap_err();
        assert!(matches!(err, SnapshotError::Version { found: 99 }));
    }

    #[test]
    fn non_finite_signals_are_refused() {
        let mut snapshot = sample();
        snapshot.pools[0].pods[0].signals.as_mut().unwrap().kv_cache_usage = Some(f64::NAN);
        assert!(matches!(Snapshot::decode(&snapshot.encode().unwrap()), Err(SnapshotError::BadSignal { .. })));
    }

    #[test]
    fn invalid_routing_config_is_refused() {
        let mut snapshot = sample();
        snapshot.routing.models[0].pool = "missing".into();
        assert!(matches!(Snapshot::decode(&snapshot.encode().unwrap()), Err(SnapshotError::Config(_))));
    }

    #[test]
    fn the_fuzz_seed_snapshot_is_a_valid_current_snapshot() {
        let seed = include_bytes!("../../fuzz/seeds/snapshot_decode/two_pods.msgpack");
        let snapshot = Snapshot::decode(seed).unwrap();
        assert_eq!((snapshot.pools[0].pods.len(), snapshot.routing.models[0].name.as_str()), (2, "m"));
    }

    #[test]
    fn a_version_1_snapshot_is_refused_by_its_version() {
        let old = serde_json::json!({
            "version": 1, "sequence": 1, "created_at_ms": 0,
            "routing": {"pools": [], "models": []}, "pools": [],
        });
        let bytes = rmp_serde::to_vec_named(&old).unwrap();
        assert!(matches!(Snapshot::decode(&bytes), Err(SnapshotError::Version { found: 1 })));
    }

    #[test]
    fn routing_that_is_not_json_is_a_decode_error() {
        let bad = serde_json::json!({
            "version": SNAPSHOT_VERSION, "sequence": 1, "created_at_ms": 0, "routing": "{not json", "pools": [],
        });
        let err = Snapshot::decode(&rmp_serde::to_vec_named(&bad).unwrap()).unwrap_err();
        assert!(err.to_string().contains("routing:"), "{err}");
    }

    #[test]
    fn oversized_bytes_are_refused_before_decoding() {
        let big = vec![0u8; MAX_SNAPSHOT_BYTES + 1];
        assert!(matches!(Snapshot::decode(&big), Err(SnapshotError::TooLarge { .. })));
    }
}
