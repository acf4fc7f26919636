//! What the prefix examples share: eight pods of one pool, prompt text, and a router
//! that has adopted a snapshot of those pods.

use std::net::SocketAddr;

use infergate_core::config::RoutingConfig;
use infergate_core::endpoint::Endpoint;
use infergate_core::router::{LocalLedger, Router};
use infergate_core::snapshot::{PodSignals, PodState, PoolState, SNAPSHOT_VERSION, Snapshot};

pub const PODS: u8 = 8;

/// An H100's FP8 KV cache, in 16-token blocks: 853,568 tokens.
pub const H100_FP8_KV_BLOCKS: u64 = 53_348;

pub fn pods() -> Vec<Endpoint> {
    (0..PODS).map(|i| Endpoint::new(SocketAddr::from(([10, 0, 0, i + 1], 8000)))).collect()
}

/// `len` bytes of lowercase text from `seed`.
pub fn text(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|i| if i % 7 == 6 { b' ' } else { rng.lowercase() as u8 }).collect()
}

/// A router of model `m` on pool `fleet`, every pod reporting `signals`.
pub fn router(signals: &PodSignals) -> Router {
    let config = RoutingConfig::single_pool("fleet", pods(), "m");
    let mut router = Router::new(config.clone(), 1);
    let snapshot = Snapshot {
        version: SNAPSHOT_VERSION,
        sequence: 1,
        created_at_ms: 1_000,
        routing: config,
        pools: vec![PoolState {
            name: "fleet".into(),
            pods: pods().into_iter().map(|pod| PodState::scraped(pod, 1_000, signals.clone())).collect(),
        }],
        peers: Default::default(),
    };
    router.apply_snapshot(snapshot, &LocalLedger::default());
    router
}
