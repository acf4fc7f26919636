//! The Gateway API Inference Extension / llm-d EPP default profile, from its published
//! formula: a saturation filter (drop pods with queue > 5 or KV use > 0.8 unless that
//! drops all), then `2·queue + 2·kv + 3·prefix` with scores in [0, 1], the highest wins,
//! ties at random. The prefix score comes from an approximate index of the router's own
//! past choices (recorded at dispatch), 64-character blocks, at most 256, LRU per pod
//! sized from the pod's `num_gpu_blocks`. Queue and KV come from the scrape.

use infergate_core::endpoint::Endpoint;
use infergate_core::prefix::{PrefixIndex, prompt_block_hashes};

use super::{PickContext, Policy, argmax, min_max_lower_better, scraped};

pub struct GieDefault {
    index: PrefixIndex,
    rng: fastrand::Rng,
    endpoints: Vec<Endpoint>,
}

impl GieDefault {
    pub fn new(pods: usize, seed: u64) -> Self {
        Self {
            index: PrefixIndex::new(u32::MAX),
            rng: fastrand::Rng::with_seed(seed),
            endpoints: (0..pods).map(crate::fleet::pod_endpoint).collect(),
        }
    }
}

impl Policy for GieDefault {
    fn name(&self) -> &'static str {
        "gie_default"
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        let n = ctx.engines.len();
        let signals: Vec<_> = (0..n).map(|i| scraped(ctx.scrape, i)).collect();
        let saturated: Vec<bool> = signals.iter().map(|s| s.waiting > 5.0 || s.kv_cache_usage > 0.8).collect();
        let keep: Vec<bool> =
            if saturated.iter().all(|s| *s) { vec![true; n] } else { saturated.iter().map(|s| !s).collect() };
        let hashes = prompt_block_hashes(&ctx.request.prompt, &ctx.request.model, None, 64, 256);
        let queue = min_max_lower_better(&signals.iter().map(|s| s.waiting).collect::<Vec<_>>());
        let totals: Vec<f64> = (0..n)
            .map(|i| {
                if !keep[i] {
                    return f64::NEG_INFINITY;
                }
                let kv = 1.0 - signals[i].kv_cache_usage.clamp(0.0, 1.0);
                let prefix = if hashes.is_empty() {
                    0.0
                } else {
                    self.index.matched_blocks(self.endpoints[i], &hashes) as f64 / hashes.len() as f64
                };
                2.0 * queue[i] + 2.0 * kv + 3.0 * prefix
            })
            .collect();
        let pod = argmax(&totals, &mut self.rng);
        let capacity = signals[pod].num_gpu_blocks.unwrap_or(16_384) as usize
            * signals[pod].block_size.unwrap_or(16) as usize
            / 16;
        self.index.record(self.endpoints[pod], &hashes, capacity.max(1));
        pod
    }
}
