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
        for (i, engine) in ctx.engines.iter().enumerate() {
            let request = SimRequest::from_text(
                u64::MAX,
                ctx.now,
                &ctx.request.prompt,
                ctx.request.output_tokens,
                ctx.request.adapter.clone(),
                engine.profile().block_size,
            );
            let ttft = engine.time_to_first_token(request, ctx.now);
            if ttft < best.1 {
                best = (i, ttft);
            }
        }
        best.0
    }
}
