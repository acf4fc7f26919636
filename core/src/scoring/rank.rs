//! Turns totals into a ranked endpoint list: best first, ties broken at random so that
//! equal pods share load instead of the first one taking it all.

use super::Candidate;
use crate::endpoint::Endpoint;

/// The `n` best candidates by total, highest first.
pub fn rank_top(
    candidates: &[Candidate],
    totals: &[f64],
    n: usize,
    rng: &mut fastrand::Rng,
) -> Vec<Endpoint> {
    let mut order: Vec<(f64, u64, Endpoint)> = candidates
        .iter()
        .zip(totals)
        .map(|(c, &total)| {
            (
                if total.is_nan() {
                    f64::NEG_INFINITY
                } else {
                    total
                },
                rng.u64(..),
                c.endpoint,
            )
        })
        .collect();
    order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    order
        .into_iter()
        .take(n)
        .map(|(_, _, endpoint)| endpoint)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::candidate;
    use super::*;

    #[test]
    fn best_first_and_truncated() {
        let pods = [
            candidate(1, 0.0, 0.0, None),
            candidate(2, 0.0, 0.0, None),
            candidate(3, 0.0, 0.0, None),
        ];
        let ranked = rank_top(&pods, &[0.1, 0.9, 0.5], 2, &mut fastrand::Rng::with_seed(1));
        assert_eq!(ranked, vec![pods[1].endpoint, pods[2].endpoint]);
    }

    #[test]
    fn ties_are_spread() {
        let pods = [candidate(1, 0.0, 0.0, None), candidate(2, 0.0, 0.0, None)];
        let mut rng = fastrand::Rng::with_seed(7);
        let firsts = (0..200)
            .filter(|_| rank_top(&pods, &[1.0, 1.0], 1, &mut rng)[0] == pods[0].endpoint)
            .count();
        assert!((60..140).contains(&firsts), "{firsts}");
    }

    #[test]
    fn empty_pool_gives_empty_list() {
        assert!(rank_top(&[], &[], 3, &mut fastrand::Rng::with_seed(1)).is_empty());
    }
}
