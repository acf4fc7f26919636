//! Running requests: min-max over the pool like the queue. A larger batch slows every
//! decode step of that pod, so even load keeps inter-token latency low.

use super::Candidate;
use super::normalize::lower_is_better;

pub(super) fn score(candidates: &[Candidate], out: &mut [f64]) {
    lower_is_better(candidates.iter().map(|c| c.running), out);
}

#[cfg(test)]
mod tests {
    use super::super::candidate;
    use super::*;

    #[test]
    fn smallest_batch_scores_one() {
        let pods = [candidate(1, 9.0, 2.0, None), candidate(2, 0.0, 6.0, None)];
        let mut out = [0.0; 2];
        score(&pods, &mut out);
        assert_eq!(out, [1.0, 0.0]);
    }
}
