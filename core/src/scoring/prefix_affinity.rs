//! Bounded-load prefix affinity: a prompt whose prefix a pod holds stays with that pod
//! while the pool is busy, until the pod is overloaded, not merely busier than the
//! idlest pod.
//!
//! The predicted TTFT is myopic. Leaving a prefix's owner for a pod with a shorter
//! queue looks cheaper for this request, but it re-prefills the prefix there: work the
//! fleet already did once, and a second copy that evicts other prefixes, whose later
//! requests then miss too. Under load that extra work lengthens every queue, which
//! makes the next owner look busy, which causes the next spill. Measured in the
//! discrete-event bench (shared-prefix, 60 req/s, before this rule): 259 of 900
//! requests left their prefix's owner, each re-prefilling 6,000 tokens, about two
//! thirds of the fleet's prefill capacity; TTFT p90 was 10.3 s.
//!
//! So, as in consistent hashing with bounded loads, while every pod has work queued an
//! owner keeps the request as long as its in-flight count is within
//! [`OWNER_LOAD_BOUND`] × the pool's mean, plus one. Past the bound the cost decides,
//! and a copy pays for the delay its extra prefill imposes (`impact_ms`). While some
//! pod is (nearly) idle, a copy there delays no one, and the cost decides alone.
//!
//! Owners are the pods that hold at least half of the longest match; the match must be
//! a real part of the prompt ([`MIN_MATCHED_SHARE`], [`MIN_MATCHED_TOKENS`]).

use super::{Candidate, RequestShape, TtftBreakdown};

/// An owner keeps the request while its in-flight count is at most this many times the
/// pool's mean (plus one). 1.25–3 measured alike on shared-prefix, 1.5 and 3 alike on
/// multi-round-chat; on the agentic sessions at 32 at once, 3 against 1.5 took TTFT p90 from 2,064 to
/// 1,756 ms (mean 1,260 → 1,269 ms), a session's 100k-token prefix being worth a longer
/// queue than a chat's; at 64 it changed nothing (quick suite, seed 42, 2026-12-07).
pub const OWNER_LOAD_BOUND: f64 = 3.0;
/// A match shorter than this share of the prompt, or than [`MIN_MATCHED_TOKENS`], is
/// not worth keeping: re-prefilling it elsewhere costs little.
pub const MIN_MATCHED_SHARE: f64 = 0.25;
pub const MIN_MATCHED_TOKENS: f64 = 512.0;
/// The pool counts as busy when even its least-loaded pod has this share of the
/// request's cold prefill queued ahead of it.
pub const BUSY_QUEUE_SHARE: f64 = 0.2;
/// What a non-owner's total drops by while an owner keeps the request: below every
/// owner, still ranked among themselves for the retry list.
const NOT_OWNER_PENALTY: f64 = 1e9;

/// Whether a pod matching `matched` blocks owns a prefix whose longest match is `best`.
pub fn is_prefix_owner(matched: usize, best: usize) -> bool {
    best > 0 && matched.saturating_mul(2) >= best
}

/// Whether the longest match is a real part of the prompt, not a shared preamble: at
/// least [`MIN_MATCHED_TOKENS`] and [`MIN_MATCHED_SHARE`] of it.
pub fn has_real_owner(shape: &RequestShape) -> bool {
    let matched_tokens = shape.best_matched_blocks as f64 * shape.tokens_per_block;
    shape.best_matched_blocks > 0 && matched_tokens >= MIN_MATCHED_TOKENS.max(MIN_MATCHED_SHARE * shape.prompt_tokens)
}

/// The request's cold prefill: the largest predicted `prefill_ms` among the pods, the
/// prompt's on the pod that holds least of it.
pub fn cold_prefill_ms(breakdowns: &[TtftBreakdown]) -> f64 {
    breakdowns.iter().map(|b| b.prefill_ms).fold(0.0, f64::max)
}

fn in_flight(c: &Candidate) -> f64 {
    let load = c.waiting + c.running;
    if load.is_finite() { load.max(0.0) } else { f64::MAX / 4.0 }
}

/// Lowers the totals of non-owners while an owner keeps the request; `breakdowns[i]`
/// is candidate `i`'s predicted cost. Returns whether it did.
pub fn keep_with_owner(
    candidates: &[Candidate],
    breakdowns: &[TtftBreakdown],
    shape: &RequestShape,
    totals: &mut [f64],
) -> bool {
    if !has_real_owner(shape) {
        return false;
    }
    let best = shape.best_matched_blocks;
    let min_queue_ms = breakdowns.iter().map(|b| b.queue_ms).fold(f64::INFINITY, f64::min);
    let cold_ms = cold_prefill_ms(breakdowns);
    if min_queue_ms.is_nan() || min_queue_ms < BUSY_QUEUE_SHARE * cold_ms {
        return false;
    }
    let mean_load = candidates.iter().map(in_flight).sum::<f64>() / candidates.len().max(1) as f64;
    let owner_load = candidates
        .iter()
        .filter(|c| is_prefix_owner(c.matched_blocks, best))
        .map(in_flight)
        .fold(f64::INFINITY, f64::min);
    if owner_load.is_nan() || owner_load > OWNER_LOAD_BOUND * mean_load + 1.0 {
        return false;
    }
    for (c, total) in candidates.iter().zip(totals.iter_mut()) {
        if !is_prefix_owner(c.matched_blocks, best) {
            *total -= NOT_OWNER_PENALTY;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::super::{CostDefaults, candidate, predicted_ttft};
    use super::*;
    use crate::config::Profile;

    /// 7,200-token prompts whose first 6,000 tokens (375 blocks of 16) a group shares.
    fn shape(best: usize) -> RequestShape {
        RequestShape { prompt_tokens: 7_200.0, tokens_per_block: 16.0, output_tokens: 192.0, best_matched_blocks: best }
    }

    fn decide(pods: &[Candidate]) -> (usize, bool) {
        let shape = shape(pods.iter().map(|c| c.matched_blocks).max().unwrap_or(0));
        let breakdowns: Vec<_> =
            pods.iter().map(|c| predicted_ttft(c, &shape, &CostDefaults::default(), Profile::Latency)).collect();
        let mut totals: Vec<f64> = breakdowns.iter().map(|b| -b.total_ms).collect();
        let kept = keep_with_owner(pods, &breakdowns, &shape, &mut totals);
        let best = totals.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i).unwrap();
        (best, kept)
    }

    /// Eight pods, each with prefill queued; pod 0 owns the group's prefix.
    fn busy_pool(owner_queue_tokens: f64, owner_in_flight: f64) -> Vec<Candidate> {
        (0..8u16)
            .map(|i| {
                let mut c = candidate(i + 1, 0.0, 6.0, Some(0.5));
                c.pending_prefill_tokens = 4_000.0;
                if i == 0 {
                    c.matched_blocks = 375;
                    c.pending_prefill_tokens = owner_queue_tokens;
                    c.running = owner_in_flight;
                }
                c.total_blocks = 450;
                c
            })
            .collect()
    }

    #[test]
    fn a_busy_pool_keeps_a_reused_prefix_on_its_owner_though_its_queue_is_longer() {
        // The owner's queue is 1.6 s longer than any other pod's: the myopic cost
        // alone would re-prefill the 6,000 shared tokens elsewhere.
        let pods = busy_pool(20_000.0, 8.0);
        let shape = shape(375);
        let owner = predicted_ttft(&pods[0], &shape, &CostDefaults::default(), Profile::Latency);
        let other = predicted_ttft(&pods[1], &shape, &CostDefaults::default(), Profile::Latency);
        assert!(owner.ttft_ms > other.ttft_ms, "the myopic prediction favours leaving");
        assert_eq!(decide(&pods), (0, true));
    }

    #[test]
    fn an_overloaded_owner_lets_the_request_go() {
        // 30 in flight against a mean of 9: past 3 × mean + 1.
        let pods = busy_pool(60_000.0, 30.0);
        let (chosen, kept) = decide(&pods);
        assert!(!kept);
        assert_ne!(chosen, 0);
    }

    #[test]
    fn an_idle_pod_lets_the_cost_decide() {
        let mut pods = busy_pool(20_000.0, 8.0);
        pods[5].pending_prefill_tokens = 0.0;
        pods[5].running = 0.0;
        assert!(!decide(&pods).1);
    }

    #[test]
    fn a_short_match_is_not_worth_keeping() {
        let mut pods = busy_pool(20_000.0, 8.0);
        pods[0].matched_blocks = 50; // 800 of 7,200 tokens
        let shape = shape(50);
        let breakdowns: Vec<_> =
            pods.iter().map(|c| predicted_ttft(c, &shape, &CostDefaults::default(), Profile::Latency)).collect();
        let mut totals = vec![0.0; pods.len()];
        assert!(!keep_with_owner(&pods, &breakdowns, &shape, &mut totals));
    }

    #[test]
    fn owners_hold_at_least_half_of_the_longest_match() {
        assert!(is_prefix_owner(10, 20) && is_prefix_owner(20, 20));
        assert!(!is_prefix_owner(9, 20) && !is_prefix_owner(0, 0));
    }
}
