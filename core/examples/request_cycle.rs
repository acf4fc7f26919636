//! Times the filter's per-request work in `infergate-core` (parse, route, explain,
//! record the prefix, release) on unique prompts (4 KiB, or the KiB given as the first
//! argument) over 8 pods. Run natively, or
//! for wasm32-wasip1 under Node's V8 (`node scripts/wasi-runner.mjs FILE.wasm`) to see
//! what the same code costs in the engine Envoy embeds.

use std::net::SocketAddr;
use std::time::Instant;

use infergate_core::config::RoutingConfig;
use infergate_core::endpoint::Endpoint;
use infergate_core::request::{RequestScanner, ScanOutcome, parse_request};
use infergate_core::router::{LocalLedger, Router};

fn body(sequence: u64, kib: usize) -> Vec<u8> {
    let filler: String = "the quick brown fox jumps over the lazy dog ".repeat(kib * 1024 / 44);
    format!("{{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{{\"role\":\"user\",\"content\":\"{sequence:016} {filler}\"}}]}}")
        .into_bytes()
}

fn main() {
    let pods: Vec<Endpoint> = (0..8).map(|i| Endpoint::new(SocketAddr::from(([10, 0, 0, i + 1], 8000)))).collect();
    let config = RoutingConfig::single_pool("fleet", pods, "m");
    let mut router = Router::new(config, 1);
    let mut ledger = LocalLedger::default();
    let kib: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(4);
    let requests = (120_000 / kib.max(1) as u64).clamp(200, 30_000);
    let mut spent = [0f64; 6];
    for i in 0..requests {
        let body = body(i, kib);
        let serde_start = Instant::now();
        let Ok(parsed) = parse_request(&body, &router.config().settings.prefix) else { return };
        std::hint::black_box(parsed);
        // The filter's path: Envoy hands the body over in chunks of up to 16 KiB.
        let t0 = Instant::now();
        let mut scanner = RequestScanner::new(&router.config().settings.prefix);
        body.chunks(16 * 1024).for_each(|chunk| scanner.feed(chunk));
        let ScanOutcome::Read(Ok(request)) = scanner.finish() else { return };
        let t1 = Instant::now();
        spent[5] += (t0 - serde_start).as_secs_f64() * 1e6;
        let Ok(decision) = router.route(&request, 1000, &mut ledger) else { return };
        let t2 = Instant::now();
        let explanation = decision.explain();
        let t3 = Instant::now();
        router.record_prefix(decision.chosen.endpoint, &decision.prefix);
        let t4 = Instant::now();
        router.release(decision.chosen.endpoint, decision.pending_prefill_tokens, &mut ledger);
        let t5 = Instant::now();
        for (slot, d) in spent.iter_mut().zip([t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4]) {
            *slot += d.as_secs_f64() * 1e6;
        }
        std::hint::black_box(explanation);
    }
    let per = |k: usize| spent[k] / requests as f64;
    println!(
        "µs per request: scan {:.1} (serde parse {:.1}), route {:.1}, explain {:.1}, record prefix {:.1}, release {:.1}",
        per(0),
        per(5),
        per(1),
        per(2),
        per(3),
        per(4)
    );
}
