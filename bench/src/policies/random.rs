//! Uniformly random.

use super::{PickContext, Policy};

pub struct Random {
    rng: fastrand::Rng,
}

impl Random {
    pub fn new(seed: u64) -> Self {
        Self { rng: fastrand::Rng::with_seed(seed) }
    }
}

impl Policy for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        self.rng.usize(..ctx.engines.len().max(1))
    }
}
