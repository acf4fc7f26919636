//! NVIDIA Dynamo's KV router: `cost = prefill_scale · max(active_prefill_blocks +
//! new_blocks − overlap_blocks, 0) + active_decode_blocks`, the lowest wins, with the
//! exact overlap and active blocks of each worker (Dynamo tracks them from KV events).

use infergate_model_sim::engine::block_hashes;

use super::{PickContext, Policy, argmax};

/// Dynamo's default weight of prefill blocks against decode blocks.
const PREFILL_SCALE: f64 = 1.0;

pub struct DynamoKv {
    rng: fastrand::Rng,
}

impl DynamoKv {
    pub fn new(seed: u64) -> Self {
        Self { rng: fastrand::Rng::with_seed(seed) }
    }
}

impl Policy for DynamoKv {
    fn name(&self) -> &'static str {
        "dynamo_kv"
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        let negated_costs: Vec<f64> = ctx
            .engines
            .iter()
            .map(|engine| {
                let block = u64::from(engine.profile().block_size.max(1));
                let hashes =
                    block_hashes(&ctx.request.prompt, ctx.request.adapter.as_deref(), engine.profile().block_size);
                let overlap = engine.cached_prefix_blocks(&hashes) as f64;
                let new_blocks = (ctx.request.prompt.len() as u64).div_ceil(4).div_ceil(block) as f64;
                let (prefill, decode) = engine.load_blocks();
                -(PREFILL_SCALE * (prefill as f64 + new_blocks - overlap).max(0.0) + decode as f64)
            })
            .collect();
        argmax(&negated_costs, &mut self.rng)
    }
}
