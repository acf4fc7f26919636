//! Envoy's `least_request`: the power of two choices over this proxy's own in-flight
//! counts (two distinct random pods, the one with fewer active requests).

use super::{PickContext, Policy};

pub struct LeastRequest {
    rng: fastrand::Rng,
}

impl LeastRequest {
    pub fn new(seed: u64) -> Self {
        Self { rng: fastrand::Rng::with_seed(seed) }
    }
}

impl Policy for LeastRequest {
    fn name(&self) -> &'static str {
        "least_request"
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        let n = ctx.engines.len();
        if n < 2 {
            return 0;
        }
        let a = self.rng.usize(..n);
        let b = (a + 1 + self.rng.usize(..n - 1)) % n;
        let (ra, rb) = (ctx.in_flight[a], ctx.in_flight[b]);
        if ra < rb || (ra == rb && self.rng.bool()) { a } else { b }
    }
}
