//! The prefix index checked against the pods' own word: each pod counts the prompt
//! tokens it looked up in its prefix cache and those it found there
//! (`PodSignals::prefix_cache_queries` and `prefix_cache_hits`), and the router knows
//! the tokens it believed cached on the requests it sent there. Their ratio, found ÷
//! believed, is exported per pool (`infergate.pool.<pool>.prefix_found_per_believed_milli`):
//! well under 1000, the index believes more than the pods hold (their KV cache also holds
//! other clients' prompts, or is smaller than their config says, or requests queue long
//! enough to find their prefix evicted); over it, the pods hold prompts this gateway
//! did not send them (another gateway's, or clients' that bypass it).
//!
//! It is a check, not a steer. Two ways of steering by it were built and measured in the
//! discrete-event bench, and both routed worse (BENCHMARKS.md, "Engine truth"):
//! shrinking an over-believed pod's room in the index confirmed itself (the router
//! believed less there, sent less there, and the pod found less), and counting only the
//! confirmed share of a pod's matches as cached sent conversations away from the pods
//! that held them. There, the index agreed with the pods request by request (believed ÷
//! found 0.96–1.01) except in overload, where requests queued long enough for their
//! prefix to be evicted before admission, which no routing choice undoes.
//!
//! Both sides are token counts over the last minute or so, sums that decay with time
//! (time constant [`TIME_CONSTANT_MS`]): the router's of what it sent, and the pod's
//! counters' increments between snapshots.

use std::collections::HashMap;

use crate::endpoint::Endpoint;

/// How fast the sums forget.
pub const TIME_CONSTANT_MS: f64 = 60_000.0;
/// The ratio is said only once the router believes this many prompt tokens' worth
/// cached lately: a belief of almost nothing says nothing about the index.
const MIN_BELIEVED_TOKENS: f64 = 4_096.0;
#[derive(Debug, Clone, Copy)]
struct PodBelief {
    /// Decayed sums of the prompt tokens sent and of those believed cached, as of `at_ms`.
    prompt_tokens: f64,
    believed_tokens: f64,
    at_ms: u64,
    /// The pod's counted lookups and hits, decayed sums of their increments, as of
    /// `truth_at_ms`, and the counters last seen.
    queried: f64,
    hit: f64,
    truth_at_ms: u64,
    counters: Option<(f64, f64)>,
}

fn keep(from_ms: u64, now_ms: u64) -> f64 {
    (-(now_ms.saturating_sub(from_ms) as f64) / TIME_CONSTANT_MS).exp()
}

impl PodBelief {
    fn decayed(&self, now_ms: u64) -> (f64, f64) {
        let keep = keep(self.at_ms, now_ms);
        (self.prompt_tokens * keep, self.believed_tokens * keep)
    }
}

/// Per pod: what this router believed cached there lately, and what the pod counted.
#[derive(Debug, Default)]
pub struct CacheTruth {
    pods: HashMap<Endpoint, PodBelief>,
}

impl CacheTruth {
    /// A request of `prompt_tokens` went to `pod`, believed to find `believed_tokens`
    /// of them cached there. Added as they are (this is on every decision's path); the
    /// sums decay at the pod's next count.
    pub fn sent(&mut self, pod: Endpoint, prompt_tokens: f64, believed_tokens: f64, now_ms: u64) {
        let entry = self.entry(pod, now_ms);
        entry.prompt_tokens += prompt_tokens.max(0.0);
        entry.believed_tokens += believed_tokens.max(0.0);
    }

    /// `pod`'s prefix-cache counters read `queries` looked up and `hits` found.
    pub fn counted(&mut self, pod: Endpoint, (queries, hits): (f64, f64), now_ms: u64) {
        let entry = self.entry(pod, now_ms);
        (entry.prompt_tokens, entry.believed_tokens) = entry.decayed(now_ms);
        entry.at_ms = entry.at_ms.max(now_ms);
        let fade = keep(entry.truth_at_ms, now_ms);
        let increments = entry.counters.map(|(q, h)| (queries - q, hits - h));
        entry.counters = Some((queries, hits));
        entry.truth_at_ms = entry.truth_at_ms.max(now_ms);
        match increments {
            // A counter that went down is a restarted pod: start over.
            Some((q, h)) if q.is_finite() && h.is_finite() && q >= 0.0 && h >= 0.0 => {
                entry.queried = entry.queried * fade + q;
                entry.hit = entry.hit * fade + h.min(q);
            }
            _ => (entry.queried, entry.hit) = (0.0, 0.0),
        }
    }

    /// Over `pods`: the share of prompt tokens they found cached, over the share this
    /// router believed cached on what it sent them; `None` until it believed at least
    /// [`MIN_BELIEVED_TOKENS`] cached there and they counted lookups.
    pub fn found_per_believed(&self, pods: impl Iterator<Item = Endpoint>, now_ms: u64) -> Option<f64> {
        let (mut hit, mut queried, mut believed, mut prompt) = (0.0, 0.0, 0.0, 0.0);
        for entry in pods.filter_map(|pod| self.pods.get(&pod)) {
            let fade = keep(entry.truth_at_ms, now_ms);
            let (p, b) = entry.decayed(now_ms);
            (hit, queried, believed, prompt) =
                (hit + entry.hit * fade, queried + entry.queried * fade, believed + b, prompt + p);
        }
        (believed >= MIN_BELIEVED_TOKENS && queried > 0.0 && prompt > 0.0)
            .then(|| (hit / queried) / (believed / prompt))
    }

    fn entry(&mut self, pod: Endpoint, now_ms: u64) -> &mut PodBelief {
        self.pods.entry(pod).or_insert(PodBelief {
            prompt_tokens: 0.0,
            believed_tokens: 0.0,
            at_ms: now_ms,
            queried: 0.0,
            hit: 0.0,
            truth_at_ms: now_ms,
            counters: None,
        })
    }

    /// Forgets pods no longer in `keep`.
    pub fn retain(&mut self, keep: impl Fn(&Endpoint) -> bool) {
        self.pods.retain(|pod, _| keep(pod));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(port: u16) -> Endpoint {
        Endpoint::new(std::net::SocketAddr::from(([10, 0, 0, 1], port)))
    }

    #[test]
    fn found_over_believed_per_pool() {
        let mut truth = CacheTruth::default();
        // Pod 1: 90% believed, 45% found; pod 2: 90% believed and found.
        for (port, found) in [(1, 0.45), (2, 0.9)] {
            truth.sent(pod(port), 0.0, 0.0, 0);
            truth.counted(pod(port), (0.0, 0.0), 0);
            for s in 1..=60u64 {
                truth.sent(pod(port), 10_000.0, 9_000.0, s * 1_000);
                truth.counted(pod(port), (10_000.0 * s as f64, 10_000.0 * s as f64 * found), s * 1_000);
            }
        }
        let one = truth.found_per_believed([pod(1)].into_iter(), 60_000).unwrap();
        assert!((one - 0.5).abs() < 1e-6, "{one}");
        let both = truth.found_per_believed([pod(1), pod(2)].into_iter(), 60_000).unwrap();
        assert!((both - 0.75).abs() < 1e-6, "{both}");
        // A restarted pod's counters start over; an unknown pod says nothing.
        truth.counted(pod(2), (5.0, 1.0), 61_000);
        assert_eq!(truth.found_per_believed([pod(3)].into_iter(), 61_000), None);
    }

    #[test]
    fn too_little_believed_says_nothing_and_beliefs_fade() {
        let mut truth = CacheTruth::default();
        truth.sent(pod(1), 10_000.0, 100.0, 0);
        truth.counted(pod(1), (0.0, 0.0), 0);
        truth.counted(pod(1), (10_000.0, 0.0), 1_000);
        assert_eq!(truth.found_per_believed([pod(1)].into_iter(), 1_000), None);
        truth.sent(pod(1), 100_000.0, 90_000.0, 2_000);
        assert!(truth.found_per_believed([pod(1)].into_iter(), 2_000).is_some());
        // Ten minutes later the old belief is worth nothing.
        assert_eq!(truth.found_per_believed([pod(1)].into_iter(), 602_000), None);
    }
}
