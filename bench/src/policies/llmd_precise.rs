//! llm-d's precise prefix-cache profile, as of llm-d Router v0.10.0
//! (`deploy/config/epp-precise-prefix-cache-config.yaml`): the decode filter (every pod
//! here decodes), then the prefix-cache scorer fed by the precise-prefix-cache producer
//! (weight 2), the kv-cache-utilization scorer (1) and the queue scorer (1), and the
//! max-score picker.
//!
//! Only the prefix score is precise: the producer indexes the engines' KV events, so it
//! is the longest prefix of the prompt's blocks the pod's events said it holds (a
//! [`KvEventView`]: computed blocks, 5 ms late), over the prompt's blocks, with no cap
//! on the match (`precise-prefix-cache-producer` hashes every block). Queue and KV
//! come from the Router's metrics scrape, every 50 ms (`--refresh-metrics-interval`,
//! `pkg/epp/server/options.go`), scored as in the default profile
//! (`(max − q) / (max − min)` and `1 − KV use`); the highest total wins, ties at random.
//! The producer can also index a routed prompt on its pod before the events come
//! (`speculativeIndexing`, 2 s; `dataproducer/preciseprefixcache/prerequest.go`), but the
//! shipped config leaves it off, as here.
//!
//! The config hashes 64-token blocks (`tokenProcessorConfig.blockSize`), which assumes
//! engines run with 64-token blocks; the match here is on the engine's own blocks, so
//! the ratio is the same up to the rounding of the last full block.

use super::{HashedOnce, KvEventView, PickContext, Policy, argmax, min_max_lower_better, scraped};

const PREFIX_WEIGHT: f64 = 2.0;
const KV_WEIGHT: f64 = 1.0;
const QUEUE_WEIGHT: f64 = 1.0;

pub struct LlmdPrecise {
    rng: fastrand::Rng,
    index: KvEventView,
}

impl LlmdPrecise {
    pub fn new(seed: u64) -> Self {
        Self { rng: fastrand::Rng::with_seed(seed), index: KvEventView::default() }
    }
}

impl Policy for LlmdPrecise {
    fn name(&self) -> &'static str {
        "llmd_precise"
    }

    fn reads_kv_events(&self) -> bool {
        true
    }

    fn scrape_interval_s(&self) -> Option<f64> {
        Some(super::LLMD_SCRAPE_INTERVAL_S)
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        self.index.catch_up(ctx.engines, ctx.now);
        let signals: Vec<_> = (0..ctx.engines.len()).map(|i| scraped(ctx.scrape, i)).collect();
        let queue = min_max_lower_better(&signals.iter().map(|s| s.waiting.unwrap_or(0.0)).collect::<Vec<_>>());
        let prompt = ctx.request.prompt.bytes();
        let mut hashed = HashedOnce::default();
        let totals: Vec<f64> = ctx
            .engines
            .iter()
            .zip(&signals)
            .zip(queue)
            .enumerate()
            .map(|(pod, ((engine, signals), queue))| {
                let hashes = hashed.get(&prompt, ctx.request.adapter.as_deref(), engine.profile().block_size);
                let prefix = if hashes.is_empty() {
                    0.0
                } else {
                    self.index.cached_prefix_blocks(pod, hashes) as f64 / hashes.len() as f64
                };
                PREFIX_WEIGHT * prefix.clamp(0.0, 1.0)
                    + KV_WEIGHT * (1.0 - signals.kv_cache_usage.unwrap_or(0.0)).clamp(0.0, 1.0)
                    + QUEUE_WEIGHT * queue.clamp(0.0, 1.0)
            })
            .collect();
        argmax(&totals, &mut self.rng)
    }
}
