//! What the router's state holds in memory once its prefix index is full: 8 pods, every
//! request a unique prompt (the data-path bench's worst case), routed and recorded
//! until each pod's capacity has turned over several times. Counts the heap with a
//! counting allocator: what it holds at the end and its peak; and times `route()` over
//! the second half, where each new key is an insertion and an eviction. Pods that do not report
//! their KV size (the bench's instant pods) get `prefix.default_blocks_per_pod`; with
//! `--kv`, each reports an H100's FP8 cache (853,568 tokens).
//!
//! Run natively, or for wasm32-wasip1 under Node's V8 (`node scripts/wasi-runner.mjs
//! FILE.wasm`), where pointers are half as wide, as in the filter:
//! `cargo run --release -p infergate-core --example index_memory -- [KIB] [--kv]`.

mod fleet;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use fleet::{H100_FP8_KV_BLOCKS, PODS, text};
use infergate_core::config::PrefixSettings;
use infergate_core::request::InferenceRequest;
use infergate_core::router::LocalLedger;
use infergate_core::snapshot::PodSignals;

struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let held = HELD.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(held, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kib: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(4);
    let kv = args.iter().any(|a| a == "--kv");
    let prefix = PrefixSettings::default();
    let mut router = fleet::router(&PodSignals {
        waiting: Some(0.0),
        running: Some(0.0),
        kv_cache_usage: Some(0.0),
        num_gpu_blocks: kv.then_some(H100_FP8_KV_BLOCKS),
        block_size: kv.then_some(16),
        ..PodSignals::default()
    });
    let mut ledger = LocalLedger::default();
    let before = HELD.load(Ordering::Relaxed);
    // Each pod's capacity in 64-character blocks (16 tokens of 4 characters, as the
    // router counts until it learns a pool's ratio), turned over four times below.
    let capacity_blocks =
        if kv { H100_FP8_KV_BLOCKS as usize * 16 * 4 / 64 } else { prefix.default_blocks_per_pod as usize };
    let requests = 4 * capacity_blocks * usize::from(PODS) * 64 / (kib * 1024);
    let mut timed = std::time::Duration::ZERO;
    for i in 0..requests {
        let request = InferenceRequest::of_text("m", &text(i as u64, kib * 1024), &prefix);
        let start = std::time::Instant::now();
        let Ok(decision) = router.route(&request, 1_050 + i as u64, &mut ledger) else { return };
        if i >= requests / 2 {
            timed += start.elapsed();
        }
        router.release(decision.chosen.endpoint, decision.pending_prefill_tokens, &mut ledger);
    }
    eprintln!("route() with the index full, second half: {:.1} us", timed.as_secs_f64() * 1e6 / (requests / 2) as f64);
    let held = HELD.load(Ordering::Relaxed).saturating_sub(before);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    let blocks = capacity_blocks * usize::from(PODS);
    println!(
        "{kib} KiB prompts, {} pods of {capacity_blocks} blocks ({}), {requests} requests: router state {:.1} MiB held, {:.1} MiB at peak, {:.0} bytes per block of capacity",
        PODS,
        if kv { "an H100's FP8 KV cache" } else { "the default when a pod does not report its KV size" },
        mib(held),
        mib(peak),
        held as f64 / blocks as f64
    );
}
