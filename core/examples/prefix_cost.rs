//! What matching whole prompts costs, per prompt size (4 KiB to 4 MiB, or the KiB given
//! as arguments): hashing throughput; the scanner's pass over a body in Envoy's 16 KiB
//! chunks, hashing included; and `route()` at 8 pods whose prefix index is full (each
//! pod's cache holds 853,568 tokens, an H100's with an FP8 KV cache), each request
//! sharing its first half with a prompt a pod holds. `route()` is the salting, the
//! search of every pod's match, the decision, and recording its claim.
//!
//! Run natively, or for wasm32-wasip1 under Node's V8 (`node scripts/wasi-runner.mjs
//! FILE.wasm`) to see what the filter pays in the engine Envoy embeds.

mod fleet;

use std::time::Instant;

use fleet::{H100_FP8_KV_BLOCKS, PODS, pods, text};
use infergate_core::config::PrefixSettings;
use infergate_core::prefix::PromptHashes;
use infergate_core::request::{InferenceRequest, RequestScanner, ScanOutcome};
use infergate_core::router::{LocalLedger, Router};
use infergate_core::snapshot::PodSignals;

fn router() -> Router {
    fleet::router(&PodSignals {
        waiting: Some(0.0),
        running: Some(1.0),
        kv_cache_usage: Some(0.3),
        num_gpu_blocks: Some(H100_FP8_KV_BLOCKS),
        block_size: Some(16),
        ..PodSignals::default()
    })
}

fn request(prefix: &PrefixSettings, shared: &[u8], own: u64, len: usize) -> InferenceRequest {
    let mut prompt = shared.to_vec();
    prompt.extend(text(own, len - shared.len()));
    InferenceRequest::of_text("m", &prompt, prefix)
}

fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![4, 64, 256, 1024, 4096] } else { sizes };
    let prefix = PrefixSettings::default();
    println!("| prompt | keys | hashing (MB/s) | scan (µs) | route (µs) |");
    println!("|---:|---:|---:|---:|---:|");
    for kib in sizes {
        let len = kib * 1024;
        let requests = (65_536 / kib).clamp(64, 2_000);
        // Hashing alone, and the scanner over a whole body.
        let prompt = text(1, len);
        let rounds = (64 * 1024 * 1024 / len).clamp(4, 4_000);
        let start = Instant::now();
        let mut keys = 0;
        for _ in 0..rounds {
            keys = std::hint::black_box(PromptHashes::of_messages(&prompt, &prefix)).len();
        }
        let hashing = (len * rounds) as f64 / start.elapsed().as_secs_f64() / 1e6;
        let content = String::from_utf8(prompt).unwrap_or_default();
        let body = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{content}"}}]}}"#).into_bytes();
        let start = Instant::now();
        for _ in 0..rounds {
            let mut scanner = RequestScanner::new(&prefix);
            body.chunks(16 * 1024).for_each(|chunk| scanner.feed(chunk));
            let ScanOutcome::Read(Ok(_)) = scanner.finish() else { return };
        }
        let scan = start.elapsed().as_secs_f64() * 1e6 / rounds as f64;
        // Routing: prompts that share their first half with one recorded on a pod.
        let mut router = router();
        let mut ledger = LocalLedger::default();
        let shared: Vec<Vec<u8>> = (0..PODS).map(|p| text(100 + u64::from(p), len / 2)).collect();
        for (p, pod) in pods().into_iter().enumerate() {
            let held = request(&prefix, &shared[p], 1_000 + p as u64, len);
            router.record_prefix(pod, &held.prompt.salted("m", None));
        }
        let batch: Vec<InferenceRequest> =
            (0..requests).map(|i| request(&prefix, &shared[i % shared.len()], 10_000 + i as u64, len)).collect();
        // Twice: the first pass warms the engine's compiled code and fills the index.
        let mut route = 0.0;
        for _ in 0..2 {
            let start = Instant::now();
            for (i, request) in batch.iter().enumerate() {
                let Ok(decision) = router.route(request, 1_050 + i as u64, &mut ledger) else { return };
                router.release(decision.chosen.endpoint, decision.pending_prefill_tokens, &mut ledger);
            }
            route = start.elapsed().as_secs_f64() * 1e6 / requests as f64;
        }
        println!("| {kib} KiB | {keys} | {hashing:.0} | {scan:.1} | {route:.1} |");
    }
}
