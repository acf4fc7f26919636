//! Ranks a pool's pods. Each scorer maps every candidate to [0, 1], higher is better;
//! the total is the weighted sum, and the highest total wins, ties broken at random.

mod kv_cache;
mod normalize;
mod queue_depth;
mod rank;
mod running_requests;

use crate::config::Weights;
use crate::endpoint::Endpoint;
pub use rank::rank_top;

/// What the router believes about one pod at decision time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub endpoint: Endpoint,
    /// Waiting requests, plus what this gateway sent since the pod was last scraped.
    pub waiting: f64,
    pub running: f64,
    /// KV-cache use in 0..=1; `None` when the pod's signals are stale or missing.
    pub kv_cache_usage: Option<f64>,
}

/// The scorers, in the order of [`Weights::as_array`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scorer {
    KvCache,
    QueueDepth,
    RunningRequests,
}

impl Scorer {
    pub const ALL: [Scorer; 3] = [Scorer::KvCache, Scorer::QueueDepth, Scorer::RunningRequests];

    /// Writes one score per candidate into `out` (same length).
    pub fn score(self, candidates: &[Candidate], out: &mut [f64]) {
        match self {
            Scorer::KvCache => kv_cache::score(candidates, out),
            Scorer::QueueDepth => queue_depth::score(candidates, out),
            Scorer::RunningRequests => running_requests::score(candidates, out),
        }
    }
}

/// `total[i] = Σ weight_s · clamp(score_s[i], 0, 1)`; NaN scores count as 0.
pub fn weighted_totals(candidates: &[Candidate], weights: &Weights) -> Vec<f64> {
    let mut totals = vec![0.0; candidates.len()];
    let mut scratch = vec![0.0; candidates.len()];
    for (scorer, weight) in Scorer::ALL.into_iter().zip(weights.as_array()) {
        if weight == 0.0 {
            continue;
        }
        scorer.score(candidates, &mut scratch);
        for (total, score) in totals.iter_mut().zip(&scratch) {
            let clamped = if score.is_nan() {
                0.0
            } else {
                score.clamp(0.0, 1.0)
            };
            *total += weight * clamped;
        }
    }
    totals
}

#[cfg(test)]
pub(crate) fn candidate(port: u16, waiting: f64, running: f64, kv: Option<f64>) -> Candidate {
    Candidate {
        endpoint: Endpoint::new(std::net::SocketAddr::from(([10, 0, 0, 1], port))),
        waiting,
        running,
        kv_cache_usage: kv,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_loaded_pod_has_the_highest_total() {
        let pods = [
            candidate(1, 5.0, 8.0, Some(0.9)),
            candidate(2, 0.0, 1.0, Some(0.1)),
            candidate(3, 2.0, 4.0, Some(0.5)),
        ];
        let totals = weighted_totals(&pods, &Weights::default());
        assert!(totals[1] > totals[2] && totals[2] > totals[0], "{totals:?}");
    }

    #[test]
    fn zero_weight_disables_a_scorer() {
        let pods = [
            candidate(1, 0.0, 0.0, Some(0.9)),
            candidate(2, 0.0, 0.0, Some(0.1)),
        ];
        let only_queue = Weights {
            kv_cache: 0.0,
            queue_depth: 1.0,
            running_requests: 0.0,
        };
        let totals = weighted_totals(&pods, &only_queue);
        assert_eq!(totals[0], totals[1]);
    }

    #[test]
    fn nan_signals_count_as_worst() {
        let pods = [
            candidate(1, 0.0, 0.0, Some(f64::NAN)),
            candidate(2, 0.0, 0.0, Some(0.5)),
        ];
        let totals = weighted_totals(&pods, &Weights::default());
        assert!(totals[1] > totals[0], "{totals:?}");
    }
}
