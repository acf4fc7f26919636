//! Queue depth: `(maxQ − q) / (maxQ − minQ)` over the pool, 1 when all are equal. A
//! waiting request's time to first token grows with every request ahead of it.

use super::Candidate;
use super::normalize::lower_is_better;

pub(super) fn score(candidates: &[Candidate], out: &mut [f64]) {
    lower_is_better(candidates.iter().map(|c| c.waiting), out);
}

#[cfg(test)]
mod tests {
    use super::super::candidate;
    use super::*;

    #[test]
    fn shortest_queue_scores_one() {
        let pods = [candidate(1, 4.0, 0.0, None), candidate(2, 0.0, 9.0, None), candidate(3, 2.0, 0.0, None)];
        let mut out = [0.0; 3];
        score(&pods, &mut out);
        assert_eq!(out, [0.0, 1.0, 0.5]);
    }
}
