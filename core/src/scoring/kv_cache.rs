//! KV-cache use: `1 − usage`. A pod near full will queue or preempt the next request,
//! so pods above the threshold are skipped outright unless every pod is. A pod without
//! fresh signals scores 0.5, neither favoured nor avoided.

use super::Candidate;

const UNKNOWN: f64 = 0.5;

pub(super) fn score(candidates: &[Candidate], out: &mut [f64]) {
    for (slot, c) in out.iter_mut().zip(candidates) {
        *slot = c.kv_cache_usage.map_or(UNKNOWN, |usage| 1.0 - usage);
    }
}

/// Whether the pod is above the KV threshold (unknown use is not).
pub fn over_threshold(candidate: &Candidate, threshold: f64) -> bool {
    candidate.kv_cache_usage.is_some_and(|usage| usage > threshold || usage.is_nan())
}

#[cfg(test)]
mod tests {
    use super::super::candidate;
    use super::*;

    #[test]
    fn emptier_cache_scores_higher() {
        let pods = [candidate(1, 0.0, 0.0, Some(0.2)), candidate(2, 0.0, 0.0, Some(0.9)), candidate(3, 0.0, 0.0, None)];
        let mut out = [0.0; 3];
        score(&pods, &mut out);
        assert!((out[0] - 0.8).abs() < 1e-9 && (out[1] - 0.1).abs() < 1e-9);
        assert_eq!(out[2], UNKNOWN);
    }

    #[test]
    fn the_threshold_ignores_unknown_use() {
        assert!(over_threshold(&candidate(1, 0.0, 0.0, Some(0.97)), 0.95));
        assert!(!over_threshold(&candidate(1, 0.0, 0.0, Some(0.95)), 0.95));
        assert!(!over_threshold(&candidate(1, 0.0, 0.0, None), 0.95));
    }
}
