//! Turns totals into a ranked endpoint list: best first, ties broken at random so that
//! equal pods share load instead of the first one taking it all.

/// Indices of the `n` best totals, highest first; `eligible[i] == false` excludes `i`.
/// Sorts in `order`, a buffer the caller keeps between calls.
pub fn rank_top(
    totals: &[f64],
    eligible: &[bool],
    n: usize,
    rng: &mut fastrand::Rng,
    order: &mut Vec<(f64, u64, usize)>,
) -> Vec<usize> {
    order.clear();
    order.extend(
        totals
            .iter()
            .zip(eligible)
            .enumerate()
            .filter(|(_, (_, ok))| **ok)
            .map(|(i, (&total, _))| (if total.is_nan() { f64::NEG_INFINITY } else { total }, rng.u64(..), i)),
    );
    // Unstable: a stable sort allocates its scratch for larger slices; the random
    // tie-break makes every key distinct anyway.
    order.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    order.iter().take(n).map(|&(_, _, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_first_and_truncated() {
        let ranked = rank_top(&[0.1, 0.9, 0.5], &[true; 3], 2, &mut fastrand::Rng::with_seed(1), &mut Vec::new());
        assert_eq!(ranked, vec![1, 2]);
    }

    #[test]
    fn ineligible_candidates_are_skipped() {
        let ranked =
            rank_top(&[0.1, 0.9, 0.5], &[true, false, true], 3, &mut fastrand::Rng::with_seed(1), &mut Vec::new());
        assert_eq!(ranked, vec![2, 0]);
    }

    #[test]
    fn ties_are_spread() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut order = Vec::new();
        let firsts = (0..200).filter(|_| rank_top(&[1.0, 1.0], &[true; 2], 1, &mut rng, &mut order)[0] == 0).count();
        assert!((60..140).contains(&firsts), "{firsts}");
    }

    #[test]
    fn empty_pool_gives_empty_list() {
        assert!(rank_top(&[], &[], 3, &mut fastrand::Rng::with_seed(1), &mut Vec::new()).is_empty());
    }
}
