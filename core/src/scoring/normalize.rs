//! Min-max normalization shared by the load scorers: the least loaded pod scores 1,
//! the most loaded 0, and all score 1 when they are equal (no pod is worse).

pub(super) fn lower_is_better(values: impl Iterator<Item = f64> + Clone, out: &mut [f64]) {
    let finite = values.clone().filter(|v| v.is_finite());
    let min = finite.clone().fold(f64::INFINITY, f64::min);
    let max = finite.fold(f64::NEG_INFINITY, f64::max);
    for (slot, value) in out.iter_mut().zip(values) {
        *slot = if !value.is_finite() {
            0.0
        } else if max > min {
            (max - value) / (max - min)
        } else {
            1.0
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_between_zero_and_one() {
        let mut out = [0.0; 3];
        lower_is_better([0.0, 5.0, 10.0].into_iter(), &mut out);
        assert_eq!(out, [1.0, 0.5, 0.0]);
    }

    #[test]
    fn equal_values_all_score_one() {
        let mut out = [0.0; 2];
        lower_is_better([3.0, 3.0].into_iter(), &mut out);
        assert_eq!(out, [1.0, 1.0]);
    }

    #[test]
    fn non_finite_values_score_zero() {
        let mut out = [9.0; 2];
        lower_is_better([f64::NAN, 1.0].into_iter(), &mut out);
        assert_eq!(out, [0.0, 1.0]);
    }
}
