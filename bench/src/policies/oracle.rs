//! The reference limit: with the exact state of every pod, send each request where it
//! would get its first token soonest (each pod's engine is copied and run forward with
//! the request; later arrivals are not foreseen).

use infergate_model_sim::engine::SimRequest;

use super::{PickContext, Policy};

pub struct Oracle;

impl Policy for Oracle {
    fn name(&self) -> &'static str {
        "oracle"
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        let mut best = (0, f64::INFINITY);
        let prompt = ctx.request.prompt.bytes();
        // Hashed once for every pod of the same block size.
        let mut request: Option<(u32, SimRequest)> = None;
        for (i, engine) in ctx.engines.iter().enumerate() {
            let block_size = engine.profile().block_size;
            let hashed = match request.take() {
                Some((size, r)) if size == block_size => r,
                _ => SimRequest::from_text(
                    u64::MAX,
                    ctx.now,
                    &prompt,
                    ctx.request.output_tokens,
                    ctx.request.adapter.clone(),
                    block_size,
                ),
            };
            request = Some((block_size, hashed.clone()));
            let ttft = engine.time_to_first_token(hashed, ctx.now);
            if ttft < best.1 {
                best = (i, ttft);
            }
        }
        best.0
    }
}
