//! llm-d's precise prefix-cache profile, as of llm-d Router v0.10.0
//! (`deploy/config/epp-precise-prefix-cache-config.yaml`): the decode filter (every pod
//! here decodes), then the prefix-cache scorer fed by the precise-prefix-cache producer
//! (weight 2), the kv-cache-utilization scorer (1) and the queue scorer (1), and the
//! max-score picker.
//!
//! Only the prefix score is precise: the producer indexes the engines' KV events, so it
//! is the longest prefix of the prompt's blocks the pod holds now (read here from the
//! engine's exact cache), over the prompt's blocks. Queue and KV come from the same
//! 100 ms metrics scrape as in the default profile, scored the same way
//! (`(max − q) / (max − min)` and `1 − KV use`); the highest total wins, ties at random.
//!
//! The config hashes 64-token blocks (`tokenProcessorConfig.blockSize`), which assumes
//! engines run with 64-token blocks; the match here is on the engine's own blocks, so
//! the ratio is the same up to the rounding of the last full block.

use super::{HashedOnce, PickContext, Policy, argmax, min_max_lower_better, scraped};

const PREFIX_WEIGHT: f64 = 2.0;
const KV_WEIGHT: f64 = 1.0;
const QUEUE_WEIGHT: f64 = 1.0;

pub struct LlmdPrecise {
    rng: fastrand::Rng,
}

impl LlmdPrecise {
    pub fn new(seed: u64) -> Self {
        Self { rng: fastrand::Rng::with_seed(seed) }
    }
}

impl Policy for LlmdPrecise {
    fn name(&self) -> &'static str {
        "llmd_precise"
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        let signals: Vec<_> = (0..ctx.engines.len()).map(|i| scraped(ctx.scrape, i)).collect();
        let queue = min_max_lower_better(&signals.iter().map(|s| s.waiting.unwrap_or(0.0)).collect::<Vec<_>>());
        let prompt = ctx.request.prompt.bytes();
        let mut hashed = HashedOnce::default();
        let totals: Vec<f64> = ctx
            .engines
            .iter()
            .zip(&signals)
            .zip(queue)
            .map(|((engine, signals), queue)| {
                let hashes = hashed.get(&prompt, ctx.request.adapter.as_deref(), engine.profile().block_size);
                let prefix = if hashes.is_empty() {
                    0.0
                } else {
                    engine.cached_prefix_blocks(hashes) as f64 / hashes.len() as f64
                };
                PREFIX_WEIGHT * prefix.clamp(0.0, 1.0)
                    + KV_WEIGHT * (1.0 - signals.kv_cache_usage.unwrap_or(0.0)).clamp(0.0, 1.0)
                    + QUEUE_WEIGHT * queue.clamp(0.0, 1.0)
            })
            .collect();
        argmax(&totals, &mut self.rng)
    }
}
