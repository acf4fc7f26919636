//! llm-d's precise prefix-cache scorer: the prefix score from the pod's exact cache
//! state (as vLLM's KV events report it), with weights prefix 2, KV 1, queue 1, on the
//! exact queue and KV use.

use infergate_model_sim::engine::block_hashes;

use super::{PickContext, Policy, argmax, min_max_lower_better};

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
        let stats: Vec<_> = ctx.engines.iter().map(|e| e.stats(ctx.now)).collect();
        let queue = min_max_lower_better(&stats.iter().map(|s| s.waiting as f64).collect::<Vec<_>>());
        let totals: Vec<f64> = ctx
            .engines
            .iter()
            .zip(&stats)
            .zip(queue)
            .map(|((engine, stats), queue)| {
                let hashes =
                    block_hashes(&ctx.request.prompt, ctx.request.adapter.as_deref(), engine.profile().block_size);
                let prefix = if hashes.is_empty() {
                    0.0
                } else {
                    engine.cached_prefix_blocks(&hashes) as f64 / hashes.len() as f64
                };
                2.0 * prefix + (1.0 - stats.kv_cache_usage.clamp(0.0, 1.0)) + queue
            })
            .collect();
        argmax(&totals, &mut self.rng)
    }
}
