//! Times what a worker does once per snapshot generation: decode the MessagePack
//! snapshot and adopt it, for pools of 8, 64 and 512 pods that report adapters and
//! their KV size. Run natively, or for wasm32-wasip1 under Node's V8
//! (`node scripts/wasi-runner.mjs FILE.wasm`), the engine Envoy embeds.

use std::net::SocketAddr;
use std::time::Instant;

use infergate_core::config::RoutingConfig;
use infergate_core::endpoint::Endpoint;
use infergate_core::router::{LocalLedger, Router};
use infergate_core::snapshot::{PodSignals, PodState, PoolState, SNAPSHOT_VERSION, Snapshot};

fn fleet(pods: usize) -> Snapshot {
    let address = |i: usize| Endpoint::new(SocketAddr::from(([10, 1, (i / 250) as u8, (i % 250) as u8 + 1], 8000)));
    let routing = RoutingConfig::single_pool("fleet", (0..pods).map(address).collect(), "m");
    let pod = |i: usize| {
        PodState::scraped(
            address(i),
            1_000,
            PodSignals {
                waiting: Some((i % 5) as f64),
                running: Some((i % 9) as f64),
                kv_cache_usage: Some((i % 10) as f64 / 10.0),
                running_adapters: vec![format!("lora-{}", i % 4)],
                max_loras: Some(4),
                ..PodSignals::default()
            },
        )
    };
    Snapshot {
        version: SNAPSHOT_VERSION,
        sequence: 1,
        created_at_ms: 1_000,
        routing,
        pools: vec![PoolState { name: "fleet".into(), pods: (0..pods).map(pod).collect() }],
        peers: Default::default(),
    }
}

fn main() {
    for pods in [8, 64, 512] {
        let snapshot = fleet(pods);
        let Ok(bytes) = snapshot.encode() else { return };
        let mut router = Router::new(snapshot.routing.clone(), 1);
        let rounds = 20_000 / pods;
        let (mut decoding, mut adopting) = (0f64, 0f64);
        for _ in 0..rounds {
            let start = Instant::now();
            let Ok(decoded) = Snapshot::decode(&bytes) else { return };
            let decoded_at = Instant::now();
            router.apply_snapshot(decoded, &LocalLedger::default());
            decoding += (decoded_at - start).as_secs_f64() * 1e6;
            adopting += decoded_at.elapsed().as_secs_f64() * 1e6;
        }
        println!(
            "{pods} pods, {} bytes: decode {:.1} µs, adopt {:.1} µs",
            bytes.len(),
            decoding / rounds as f64,
            adopting / rounds as f64
        );
    }
}
