//! A conversation's next turn stays on the pod that holds the conversation unless
//! another pod is faster by more than the move costs.
//!
//! In a chat, every pod that served the app's system prompt matches the start of the
//! next turn; only the pod that served the previous turn also holds the history after
//! it. The predicted TTFT prices a move as that history's prefill on the other pod: a
//! few milliseconds for a short history, so a pod a few milliseconds less busy took the
//! turn. The move is not that cheap: the history is then cached twice, the copy on the
//! conversation's pod is dead weight that evicts other prefixes, and every later turn
//! follows to a pod that had to rebuild it. In the discrete-event bench (bursty-chat,
//! 12 request sets) 7.9% of follow-up turns left their pod this way or for LoRA slots;
//! through Envoy 7-16% did.
//!
//! So when a preamble of at least [`MIN_MATCHED_TOKENS`] is held by more than the
//! longest match's pods and the longest match goes further (a conversation's own
//! history), every pod that matches less pays [`MOVE_WEIGHT`] times the part of its
//! prefill that rebuilds the history (its prefill times the history's share of the
//! tokens it would compute), at most [`MOVE_CAP_PREFILLS`] times the largest predicted
//! prefill among the pool's pods (this prompt's on the pod that holds least of it): a
//! busier conversation pod keeps the turn up to that, and one slower than the rest by
//! more than that lets it go. Where every pod is about as busy, the cap binds once the
//! history is more than a 20th of what the other pod would compute; below that the
//! weight decides. The history's share, not the difference of the two pods' prefill
//! times: the conversation's pod often runs the bigger batch, and its shorter prefill
//! was then predicted as slow as the other's longer one. A prompt
//! whose only real match is on one pod (a shared document, a new group's prefix) is
//! left to the bounded-load rule (`prefix_affinity`); one that every pod matches alike
//! has no conversation to keep.
//!
//! Measured (discrete-event, 12 request sets of part 2's bursty-chat; BENCHMARKS.md):
//! weights of 1, 4, 8, 20 and 50 kept 93.4, 95.0, 95.7, 95.9 and 96.0% of follow-ups
//! on their pod (92.1% without), pooled p90 54 ms and p99 149 ms throughout; 1,000
//! without the cap raised the p99 to 6.1 s.

use super::prefix_affinity::{MIN_MATCHED_TOKENS, cold_prefill_ms, has_real_owner};
use super::{Candidate, RequestShape, TtftBreakdown};

/// How many times the prefill that rebuilds the history elsewhere a move costs.
pub const MOVE_WEIGHT: f64 = 20.0;
/// The most a move costs, in the largest predicted prefill among the pool's pods.
pub const MOVE_CAP_PREFILLS: f64 = 1.0;

/// Lowers, in `totals` (negated costs, higher is better), the candidates that hold less
/// of a conversation than its pod by what moving there costs; `breakdowns[i]` is
/// candidate `i`'s predicted cost. Returns whether the prompt is such a conversation.
pub fn keep_conversation(
    candidates: &[Candidate],
    breakdowns: &[TtftBreakdown],
    shape: &RequestShape,
    totals: &mut [f64],
) -> bool {
    if !has_real_owner(shape) {
        return false;
    }
    let longest = shape.best_matched_blocks;
    let preamble = candidates.iter().map(|c| c.matched_blocks).filter(|&m| m < longest).max().unwrap_or(0);
    if (preamble as f64) * shape.tokens_per_block < MIN_MATCHED_TOKENS {
        return false;
    }
    let cap = MOVE_CAP_PREFILLS * cold_prefill_ms(breakdowns);
    for ((c, b), total) in candidates.iter().zip(breakdowns).zip(totals.iter_mut()) {
        if c.matched_blocks < longest {
            // The part of its prefill that rebuilds the conversation's history.
            let uncached = (shape.prompt_tokens - c.matched_blocks as f64 * shape.tokens_per_block).max(1.0);
            let history = (longest - c.matched_blocks) as f64 * shape.tokens_per_block;
            let rebuild_ms = b.prefill_ms * (history / uncached).min(1.0);
            if rebuild_ms.is_finite() {
                *total -= (MOVE_WEIGHT * rebuild_ms).min(cap);
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::super::{CostDefaults, candidate, predicted_ttft};
    use super::*;
    use crate::config::Profile;

    /// A 2,600-token turn in 16-token blocks: 125 blocks of system prompt, which every
    /// pod holds, and the conversation's history up to block 150 on pod 0.
    fn chat(own_queue_tokens: f64, preamble: usize) -> (Vec<Candidate>, RequestShape) {
        let pods = (0..4u16)
            .map(|i| {
                let mut c = candidate(i + 1, 0.0, 2.0, Some(0.3));
                c.matched_blocks = if i == 0 { 150 } else { preamble };
                c.total_blocks = 163;
                if i == 0 {
                    c.pending_prefill_tokens = own_queue_tokens;
                }
                c
            })
            .collect();
        let shape = RequestShape {
            prompt_tokens: 2_600.0,
            tokens_per_block: 16.0,
            output_tokens: 192.0,
            best_matched_blocks: 150,
        };
        (pods, shape)
    }

    /// The chosen pod, the conversation pod's and the best other pod's myopic TTFT, and
    /// whether the rule applied.
    fn decide(pods: &[Candidate], shape: &RequestShape) -> (usize, f64, f64, bool) {
        let breakdowns: Vec<_> =
            pods.iter().map(|c| predicted_ttft(c, shape, &CostDefaults::default(), Profile::Latency)).collect();
        let mut totals: Vec<f64> = breakdowns.iter().map(|b| -b.total_ms).collect();
        let kept = keep_conversation(pods, &breakdowns, shape, &mut totals);
        let chosen = totals.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(usize::MAX, |(i, _)| i);
        let others = breakdowns.iter().skip(1).map(|b| b.ttft_ms).fold(f64::INFINITY, f64::min);
        (chosen, breakdowns.first().map_or(f64::NAN, |b| b.ttft_ms), others, kept)
    }

    #[test]
    fn a_slightly_busier_conversation_pod_keeps_the_turn() {
        let (pods, shape) = chat(600.0, 125);
        let (chosen, own_ms, other_ms, kept) = decide(&pods, &shape);
        assert!(own_ms > other_ms, "the myopic prediction favours leaving: {own_ms} against {other_ms}");
        assert!(kept);
        assert_eq!(chosen, 0);
    }

    #[test]
    fn a_conversation_pod_slower_by_more_than_a_whole_prefill_lets_the_turn_go() {
        // 3,000 tokens queued: slower than the others by more than the cap (one
        // prefill of the 600 tokens they lack, the largest here), less than 20x it.
        let (pods, shape) = chat(3_000.0, 125);
        let (chosen, ..) = decide(&pods, &shape);
        assert_ne!(chosen, 0);
    }

    #[test]
    fn without_a_preamble_others_hold_the_rule_stands_aside() {
        // Only pod 0 holds anything real: a new group's prefix, not a conversation.
        let (pods, shape) = chat(600.0, 0);
        let breakdowns: Vec<_> =
            pods.iter().map(|c| predicted_ttft(c, &shape, &CostDefaults::default(), Profile::Latency)).collect();
        let mut totals = vec![0.0; pods.len()];
        assert!(!keep_conversation(&pods, &breakdowns, &shape, &mut totals));
        assert!(totals.iter().all(|&t| t == 0.0));
    }

    #[test]
    fn a_match_every_pod_holds_alike_is_no_conversation() {
        let (mut pods, shape) = chat(600.0, 150);
        pods.iter_mut().for_each(|c| c.matched_blocks = 150);
        let breakdowns: Vec<_> =
            pods.iter().map(|c| predicted_ttft(c, &shape, &CostDefaults::default(), Profile::Latency)).collect();
        let mut totals = vec![0.0; pods.len()];
        assert!(!keep_conversation(&pods, &breakdowns, &shape, &mut totals));
        assert!(totals.iter().all(|&t| t == 0.0));
    }
}
