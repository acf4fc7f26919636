//! llm-d Router's P/D scheduling as its sample config runs it, llm-d-router v0.10.0
//! (`71f4f0999f95`; HEAD `ebab687927f5` is the same for these plugins):
//! `deploy/config/pd-epp-config.yaml` with the `disagg-profile-handler`
//! (`pkg/epp/framework/plugins/scheduling/profilehandler/disagg/disagg_profile_handler.go`)
//! and its `prefix-based-pd-decider` (`prefix_based_pd_decider.go`, `nonCachedTokens: 16`).
//!
//! 1. The decode profile runs first: the decode filter (pods labelled decode or both),
//!    then `prefix-cache-scorer` (weight 2) + `queue-scorer` (weight 1), max score,
//!    ties at random.
//! 2. The decider: prompt tokens (the estimate, 4 bytes a token) minus the decode pod's
//!    hit (matched blocks × block size) ≥ 16 ⇒ split. No ratio test, no prompt
//!    minimum (`promptTokens` 0).
//! 3. If split, the prefill profile, with the prefill filter and the same two scorers.
//! 4. The approximate prefix producer records the prompt for the decode pod and the
//!    prefill pod (`approximateprefix/plugin.go`, `PreRequest`).
//!
//! The prefix score is the match ratio of llm-d's defaults (the scorer's `w = 0`): the
//! producer's own index of prompts routed, blocks of 64 tokens (16 clamped up to 64),
//! at most `maxPrefixTokensToMatch: 16384` tokens, a per-pod LRU of the pod's
//! `num_gpu_blocks` (31,250 before a scrape gives it). The queue score is
//! `(max − q) / (max − min)` over the profile's pods' scraped waiting queues.

use super::routed_index::{RoutedIndex, block_hashes};
use crate::disagg::policy::{PdChoice, PdContext, PdPolicy, decode_pods, prefill_pods};
use crate::policies::{argmax, min_max_lower_better, scraped};

const PREFIX_WEIGHT: f64 = 2.0;
const QUEUE_WEIGHT: f64 = 1.0;
/// The decider's `nonCachedTokens` in the sample config.
const NON_CACHED_TOKENS: usize = 16;
const BLOCK_TOKENS: usize = 64;
const MAX_PREFIX_TOKENS: usize = 16_384;
const DEFAULT_LRU_CAPACITY: u64 = 31_250;

pub struct LlmdPd {
    index: RoutedIndex,
    /// Whether each pod's LRU has its size yet.
    sized: Vec<bool>,
    rng: fastrand::Rng,
}

impl LlmdPd {
    pub fn new(pods: usize, seed: u64) -> Self {
        Self {
            index: RoutedIndex::new(pods, DEFAULT_LRU_CAPACITY),
            sized: vec![false; pods],
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// One scheduling profile over `pods`: the winner and its matched blocks.
    fn profile(&mut self, ctx: &PdContext<'_>, pods: &[usize], hashes: &[u64]) -> Option<(usize, usize)> {
        if pods.is_empty() {
            return None;
        }
        let waiting: Vec<f64> = pods.iter().map(|&p| scraped(ctx.scrape, p).waiting.unwrap_or(0.0)).collect();
        let queue = min_max_lower_better(&waiting);
        let matched: Vec<usize> = pods.iter().map(|&p| self.index.matched(p, hashes)).collect();
        let totals: Vec<f64> = matched
            .iter()
            .zip(&queue)
            .map(|(&m, &q)| {
                let prefix = if hashes.is_empty() { 0.0 } else { m as f64 / hashes.len() as f64 };
                PREFIX_WEIGHT * prefix.clamp(0.0, 1.0) + QUEUE_WEIGHT * q.clamp(0.0, 1.0)
            })
            .collect();
        let best = argmax(&totals, &mut self.rng);
        Some((*pods.get(best)?, *matched.get(best)?))
    }

    fn record(&mut self, ctx: &PdContext<'_>, pod: usize, hashes: &[u64]) {
        if let Some(sized) = self.sized.get_mut(pod).filter(|s| !**s) {
            *sized = true;
            let blocks = scraped(ctx.scrape, pod).num_gpu_blocks.filter(|b| *b > 0).unwrap_or(DEFAULT_LRU_CAPACITY);
            self.index.set_capacity(pod, blocks);
        }
        self.index.record(pod, hashes);
    }
}

impl PdPolicy for LlmdPd {
    fn name(&self) -> String {
        "pd/llmd".into()
    }

    fn route(&mut self, ctx: &PdContext<'_>) -> PdChoice {
        let prompt = ctx.request.prompt.bytes();
        let hashes = block_hashes(&prompt, &ctx.request.model, BLOCK_TOKENS, MAX_PREFIX_TOKENS);
        let Some((decode, matched)) = self.profile(ctx, &decode_pods(ctx.roles), &hashes) else {
            return PdChoice::whole(0);
        };
        let prompt_tokens = prompt.len().div_ceil(4);
        let hit = matched * BLOCK_TOKENS;
        let split = NON_CACHED_TOKENS > 0 && prompt_tokens.saturating_sub(hit) >= NON_CACHED_TOKENS;
        let prefill = if split {
            // No prefill pod: the request is served whole on the decode pod.
            self.profile(ctx, &prefill_pods(ctx.roles), &hashes).map(|(p, _)| p).filter(|&p| p != decode)
        } else {
            None
        };
        self.record(ctx, decode, &hashes);
        if let Some(p) = prefill {
            self.record(ctx, p, &hashes);
        }
        PdChoice { decode, prefill }
    }
}
