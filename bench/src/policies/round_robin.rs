//! Round robin: each pod in turn, blind to load.
//!
//! [`RoundRobin::default`] keeps one cursor over the fleet: a balancer with a single
//! thread, the strongest form, and part 1's baseline. [`RoundRobin::envoy`] is Envoy's
//! `round_robin` as part 2 runs it. Envoy's worker threads balance alone ("Why doesn't
//! RR load balancing appear to be even?" in Envoy's FAQ): each worker's load balancer
//! keeps its own index, initialised to a random seed, and a request is balanced by the
//! worker that accepted its connection. With two workers the fleet sees two cursors
//! interleaved, and whenever they are near each other a pod takes two requests in a
//! row. Part 2's prediction of round robin models that, so that it predicts what runs.

use super::{PickContext, Policy};

pub struct RoundRobin {
    /// One cursor per worker.
    cursors: Vec<usize>,
    /// Picks the worker of each request; `None` with one worker.
    worker_rng: Option<fastrand::Rng>,
}

impl Default for RoundRobin {
    fn default() -> Self {
        Self { cursors: vec![0], worker_rng: None }
    }
}

impl RoundRobin {
    /// Envoy's `round_robin` with `workers` worker threads: each starts at a random
    /// pod, and each request lands on a worker at random. This approximates part 2's
    /// client, which keeps up to 512 keep-alive connections that the kernel spreads
    /// over the workers and reuses whichever is idle; it does not model connections,
    /// so a client that sends its requests one by one over one connection (all on one
    /// worker) would see fewer repeats than this predicts. Checked against part 2: round
    /// robin's measured shared-prefix p90 745-762 ms against 745 predicted.
    pub fn envoy(workers: usize, seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let cursors = (0..workers.max(1)).map(|_| rng.usize(..usize::from(u16::MAX))).collect();
        Self { cursors, worker_rng: (workers > 1).then_some(rng) }
    }
}

impl Policy for RoundRobin {
    fn name(&self) -> &'static str {
        "round_robin"
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        let worker = match &mut self.worker_rng {
            Some(rng) => rng.usize(..self.cursors.len()),
            None => 0,
        };
        let Some(cursor) = self.cursors.get_mut(worker) else { return 0 };
        let pod = *cursor % ctx.engines.len().max(1);
        *cursor = cursor.wrapping_add(1);
        pod
    }
}
