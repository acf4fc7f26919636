//! Micro-benchmarks of the filter's per-request work, natively (the filter runs the same
//! `infergate-core` code compiled to wasm32, where V8 is slower by a constant factor):
//! body parsing and model extraction, hashing a whole prompt into its prefix keys, one
//! routing decision at 4 to 256 pods and at prompts of 4 KiB to 4 MiB, and decoding a
//! snapshot of 8 to 512 pods.

use std::net::SocketAddr;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use infergate_bench::datapath::chat_body;
use infergate_core::config::{PrefixSettings, RoutingConfig};
use infergate_core::endpoint::Endpoint;
use infergate_core::prefix::PromptHashes;
use infergate_core::request::{RequestScanner, ScanOutcome, parse_request};
use infergate_core::router::{LocalLedger, Router};
use infergate_core::snapshot::{PodSignals, PodState, PoolState, SNAPSHOT_VERSION, Snapshot};

const BODIES: [usize; 6] = [1024, 4096, 64 * 1024, 220 * 1024, 1024 * 1024, 4096 * 1024];
const PROMPTS: [usize; 5] = [4096, 64 * 1024, 256 * 1024, 1024 * 1024, 4096 * 1024];
const POD_COUNTS: [usize; 4] = [4, 16, 64, 256];

fn endpoint(i: usize) -> Endpoint {
    Endpoint::new(SocketAddr::from(([10, 0, (i / 250) as u8, (i % 250) as u8 + 1], 8000)))
}

fn routing(pods: usize) -> RoutingConfig {
    RoutingConfig::single_pool("fleet", (0..pods).map(endpoint).collect(), "m")
}

fn snapshot(pods: usize) -> Snapshot {
    Snapshot {
        version: SNAPSHOT_VERSION,
        sequence: 1,
        created_at_ms: 1_000_000,
        routing: routing(pods),
        pools: vec![PoolState {
            name: "fleet".into(),
            pods: (0..pods)
                .map(|i| {
                    PodState::scraped(
                        endpoint(i),
                        1_000_000,
                        PodSignals {
                            waiting: Some((i % 7) as f64),
                            running: Some((i % 13) as f64),
                            kv_cache_usage: Some((i % 10) as f64 / 10.0),
                            ..PodSignals::default()
                        },
                    )
                })
                .collect(),
        }],
        peers: Default::default(),
    }
}

fn parsing(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse_request");
    for size in BODIES {
        let body = chat_body(size, 7);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &body, |b, body| {
            b.iter(|| parse_request(body, &PrefixSettings::default()).map(|r| r.prompt.len()))
        });
    }
    group.finish();
    // The filter's path: the same bodies in Envoy-sized 16 KiB chunks, each prompt
    // hashed whole as it streams.
    let mut group = c.benchmark_group("request_scanner");
    for size in BODIES {
        let body = chat_body(size, 7);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &body, |b, body| {
            b.iter(|| {
                let mut scanner = RequestScanner::new(&PrefixSettings::default());
                body.chunks(16 * 1024).for_each(|chunk| scanner.feed(chunk));
                match scanner.finish() {
                    ScanOutcome::Read(request) => request.map(|r| r.prompt.len()).ok(),
                    ScanOutcome::NeedsFullParse => None,
                }
            })
        });
    }
    group.finish();
}

fn hashing(c: &mut Criterion) {
    let mut group = c.benchmark_group("prompt_hashes");
    for size in PROMPTS {
        let prompt = chat_body(size, 7);
        group.throughput(Throughput::Bytes(prompt.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &prompt, |b, prompt| {
            b.iter(|| PromptHashes::of_messages(prompt, &PrefixSettings::default()).len())
        });
    }
    group.finish();
}

/// The lookup and the decision for one hashed prompt, at 8 pods, each pod holding the
/// prompt's first half (its keys recorded by an earlier decision).
fn routing_by_prompt(c: &mut Criterion) {
    let mut group = c.benchmark_group("route_8pods");
    for size in PROMPTS {
        let mut router = Router::new(routing(8), 42);
        let mut ledger = LocalLedger::default();
        router.apply_snapshot(snapshot(8), &ledger);
        let body = chat_body(size, 7);
        let request = parse_request(&body, &PrefixSettings::default()).expect("a valid body");
        let half = parse_request(&chat_body(size / 2, 7), &PrefixSettings::default()).expect("a valid body");
        for i in 0..8 {
            router.record_prefix(endpoint(i), &half.prompt.salted("m", None));
        }
        group.bench_function(BenchmarkId::from_parameter(size), |b| {
            b.iter(|| {
                let decision = router.route(&request, 1_000_050, &mut ledger).expect("routed");
                router.release(decision.chosen.endpoint, decision.pending_prefill_tokens, &mut ledger);
                decision.chosen.endpoint
            })
        });
    }
    group.finish();
}

fn routing_decision(c: &mut Criterion) {
    let mut group = c.benchmark_group("route_4KiB");
    let request = parse_request(&chat_body(4096, 7), &PrefixSettings::default()).expect("a valid body");
    for pods in POD_COUNTS {
        let mut router = Router::new(routing(pods), 42);
        let mut ledger = LocalLedger::default();
        router.apply_snapshot(snapshot(pods), &ledger);
        group.bench_function(BenchmarkId::from_parameter(pods), |b| {
            b.iter(|| {
                let decision = router.route(&request, 1_000_050, &mut ledger).expect("routed");
                router.release(decision.chosen.endpoint, decision.pending_prefill_tokens, &mut ledger);
                decision.chosen.endpoint
            })
        });
    }
    group.finish();
}

fn snapshot_decoding(c: &mut Criterion) {
    let mut group = c.benchmark_group("snapshot_decode");
    for pods in [8, 64, 512] {
        let bytes = snapshot(pods).encode().expect("encodes");
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(pods), &bytes, |b, bytes| {
            b.iter(|| Snapshot::decode(bytes).map(|s| s.pools.len()))
        });
    }
    group.finish();
}

criterion_group!(hot_path, parsing, hashing, routing_by_prompt, routing_decision, snapshot_decoding);
criterion_main!(hot_path);
