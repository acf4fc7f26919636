//! NVIDIA Dynamo's KV router with its default selector, from `ai-dynamo/dynamo` 1.6.1
//! `lib/kv-router/src/scheduling/selector/default.rs` (the cost written out in
//! `selector/reference.rs`) and `scheduling/config.rs` (defaults
//! `overlap_score_credit` 1.0, `prefill_load_scale` 1.0, `router_temperature` 0). Per
//! worker, in blocks of the engine's block size `bs`:
//!
//! `cost = prefill_load_scale · max((active_prefill_tokens + isl) / bs − overlap_score_credit · overlap, 0)
//!        + active_decode_blocks + additional_active_blocks`
//!
//! and the lowest cost wins, ties at random (temperature 0). `isl / bs` is not rounded.
//!
//! - `overlap`: the leading prompt blocks the worker's KV events said it holds (a
//!   [`KvEventView`]: computed blocks, 5 ms late). Dynamo indexes its workers' events;
//!   its index of routed prompts beside them (`router_predicted_ttl_secs`) is off by
//!   default (`None`), as here.
//! - `active_prefill_tokens`: tracked by the router, not read from the engine: the
//!   uncached tokens (`isl − overlap · bs`) of each request it sent the worker, until
//!   that request's first token.
//! - `active_decode_blocks`: the distinct prompt block hashes of every request the
//!   router sent the worker that has not finished (in prefill or decoding); a block
//!   shared by several counts once.
//! - `additional_active_blocks`: this request's prompt blocks not already active there.
//!
//! Matches the default of dispatching at once: the router's own queue
//! (`--router-queue-threshold`) defaults to `None` in 1.6.1 (`ai-dynamo` 1.6.1,
//! `dynamo/common/configuration/groups/kv_router_args.py`, and the runtime's
//! `router_queue_threshold: Optional[float] = None`), so no request is held back
//! while every worker is busy.

use std::collections::HashMap;

use infergate_core::wire::CHARS_PER_TOKEN;

use super::{HashedOnce, KvEventView, PickContext, Policy, argmax};
use crate::request::BenchRequest;

const OVERLAP_SCORE_CREDIT: f64 = 1.0;
const PREFILL_LOAD_SCALE: f64 = 1.0;

/// What the router tracks of one worker.
#[derive(Debug, Default)]
struct WorkerLoad {
    prefill_tokens: u64,
    /// Each active prompt block, with how many live requests hold it.
    blocks: HashMap<u64, u32>,
}

/// A request the router sent and has not seen finish.
#[derive(Debug)]
struct Routed {
    pod: usize,
    /// Uncached tokens still counted as prefill (0 after the first token).
    prefill_tokens: u64,
    blocks: Vec<u64>,
}

pub struct DynamoKv {
    rng: fastrand::Rng,
    workers: Vec<WorkerLoad>,
    routed: HashMap<usize, Routed>,
    index: KvEventView,
}

impl DynamoKv {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(seed),
            workers: Vec::new(),
            routed: HashMap::new(),
            index: KvEventView::default(),
        }
    }

    fn release_prefill(&mut self, routed_pod: usize, tokens: u64) {
        if let Some(worker) = self.workers.get_mut(routed_pod) {
            worker.prefill_tokens = worker.prefill_tokens.saturating_sub(tokens);
        }
    }
}

/// The request's input length in tokens, as the engine counts it.
fn isl_tokens(request: &BenchRequest) -> u64 {
    (request.prompt.len().div_ceil(CHARS_PER_TOKEN) as u64).max(1)
}

impl Policy for DynamoKv {
    fn name(&self) -> &'static str {
        "dynamo_kv"
    }

    fn reads_kv_events(&self) -> bool {
        true
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        self.index.catch_up(ctx.engines, ctx.now);
        if self.workers.len() < ctx.engines.len() {
            self.workers.resize_with(ctx.engines.len(), WorkerLoad::default);
        }
        let isl = isl_tokens(ctx.request);
        let prompt = ctx.request.prompt.bytes();
        let mut hashed = HashedOnce::default();
        // Per worker: its block size, the request's blocks there, and the overlap.
        let views: Vec<(u64, Vec<u64>, u64)> = ctx
            .engines
            .iter()
            .enumerate()
            .map(|(pod, engine)| {
                let block_size = engine.profile().block_size.max(1);
                let hashes = hashed.get(&prompt, ctx.request.adapter.as_deref(), block_size).to_vec();
                let overlap = self.index.cached_prefix_blocks(pod, &hashes) as u64;
                (u64::from(block_size), hashes, overlap)
            })
            .collect();
        let negated_costs: Vec<f64> = views
            .iter()
            .zip(&self.workers)
            .map(|((block_size, hashes, overlap), load)| {
                let raw_prefill_blocks = (load.prefill_tokens + isl) as f64 / *block_size as f64;
                let prefill = (raw_prefill_blocks - OVERLAP_SCORE_CREDIT * *overlap as f64).max(0.0);
                let additional = hashes.iter().filter(|h| !load.blocks.contains_key(h)).count();
                let decode = (load.blocks.len() + additional) as f64;
                -(PREFILL_LOAD_SCALE * prefill + decode)
            })
            .collect();
        let pod = argmax(&negated_costs, &mut self.rng);
        if let (Some((block_size, hashes, overlap)), Some(load)) =
            (views.into_iter().nth(pod), self.workers.get_mut(pod))
        {
            let prefill_tokens = isl.saturating_sub(overlap * block_size);
            load.prefill_tokens += prefill_tokens;
            for &hash in &hashes {
                *load.blocks.entry(hash).or_default() += 1;
            }
            self.routed.insert(ctx.id, Routed { pod, prefill_tokens, blocks: hashes });
        }
        pod
    }

    fn on_first_token(&mut self, id: usize, _pod: usize, _request: &BenchRequest, _at: f64) {
        let Some(routed) = self.routed.get_mut(&id) else { return };
        let (pod, tokens) = (routed.pod, std::mem::take(&mut routed.prefill_tokens));
        self.release_prefill(pod, tokens);
    }

    fn on_finish(&mut self, id: usize, _pod: usize) {
        let Some(routed) = self.routed.remove(&id) else { return };
        self.release_prefill(routed.pod, routed.prefill_tokens);
        let Some(load) = self.workers.get_mut(routed.pod) else { return };
        for hash in routed.blocks {
            if let Some(count) = load.blocks.get_mut(&hash) {
                *count -= 1;
                if *count == 0 {
                    load.blocks.remove(&hash);
                }
            }
        }
    }
}
