//! SGLang model gateway's `cache_aware`: when the pool is imbalanced
//! (`max_load − min_load > 64` and `max_load > 1.5 × min_load`, loads being the
//! router's own in-flight counts) it takes the least loaded pod; otherwise it matches
//! the prompt against an approximate radix tree of past prompts per pod and takes the
//! best match if its rate exceeds 0.3, else the pod with the smallest tree. Prompts are
//! inserted into the chosen pod's tree at routing time.
//!
//! The tree is approximated at 16-character granularity (chained block hashes, LRU
//! bounded at 2^24 characters per pod, SGLang's default `max_tree_size`). It is given
//! the whole prompt, which is generous: the design notes report that SGLang hashes only
//! the first message.

use infergate_core::endpoint::Endpoint;
use infergate_core::prefix::{PrefixIndex, prompt_block_hashes};

use super::{PickContext, Policy};

const BLOCK_CHARS: u32 = 16;
const TREE_CHARS: usize = 1 << 24;

pub struct SglangCacheAware {
    trees: PrefixIndex,
    endpoints: Vec<Endpoint>,
}

impl SglangCacheAware {
    pub fn new(pods: usize) -> Self {
        Self { trees: PrefixIndex::new(u32::MAX), endpoints: (0..pods).map(crate::fleet::pod_endpoint).collect() }
    }
}

impl Policy for SglangCacheAware {
    fn name(&self) -> &'static str {
        "sglang_cache_aware"
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        let loads: Vec<u32> = ctx.in_flight.to_vec();
        let max = loads.iter().copied().max().unwrap_or(0);
        let min = loads.iter().copied().min().unwrap_or(0);
        let hashes = prompt_block_hashes(&ctx.request.prompt, &ctx.request.model, None, BLOCK_CHARS, u32::MAX);
        let pod = if max - min > 64 && f64::from(max) > 1.5 * f64::from(min) {
            loads.iter().enumerate().min_by_key(|(_, l)| **l).map_or(0, |(i, _)| i)
        } else {
            let total = ctx.request.prompt.len().max(1) as f64;
            let (best, rate) = self
                .endpoints
                .iter()
                .enumerate()
                .map(|(i, e)| (i, (self.trees.matched_blocks(*e, &hashes) * BLOCK_CHARS as usize) as f64 / total))
                .fold((0, -1.0), |acc, x| if x.1 > acc.1 { x } else { acc });
            if rate > 0.3 {
                best
            } else {
                self.endpoints.iter().enumerate().min_by_key(|(_, e)| self.trees.blocks_of(**e)).map_or(0, |(i, _)| i)
            }
        };
        self.trees.record(self.endpoints[pod], &hashes, TREE_CHARS / BLOCK_CHARS as usize);
        pod
    }
}
