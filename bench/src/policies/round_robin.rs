//! Round robin: each pod in turn, blind to load.

use super::{PickContext, Policy};

#[derive(Default)]
pub struct RoundRobin {
    next: usize,
}

impl Policy for RoundRobin {
    fn name(&self) -> &'static str {
        "round_robin"
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        let pod = self.next % ctx.engines.len().max(1);
        self.next = self.next.wrapping_add(1);
        pod
    }
}
