//! Each pool's predictions checked against the clock.
//!
//! The predicted TTFT rests on speeds the agent learned from the pod's own histograms.
//! Those can be wrong: hardware slower than the calibration, an engine whose histograms
//! mean something else, a simulator whose clock is scaled, a pod that has just joined.
//! The proxy sees the truth of every streamed request it routes: the time from its
//! decision to the first token. This keeps, per pool, a factor by which its pods'
//! time-based predictions (queue, prefill, decode step) are stretched, learned from
//! `observed / predicted` in log space with an exponentially weighted mean:
//!
//! ```text
//! log_factor ← log_factor + ALPHA × clamp(ln(observed / predicted), ±MAX_STEP)
//! factor      = clamp(exp(log_factor), MIN_FACTOR, MAX_FACTOR)
//! ```
//!
//! The prediction compared is the one made with the factor already applied, so the
//! update is the residual error and the factor settles where predictions match the
//! clock. A pool never observed has factor 1.
//!
//! The factor is the pool's, not each pod's: a per-pod factor was measured to herd
//! (shared-prefix at 60 req/s in the discrete-event bench: TTFT p90 7.9 s → 33.8 s).
//! A first token reports the pod's speed seconds late, so a pod that looked fast drew
//! every request until its late answers caught up, and one that looked slow got no
//! request that could correct it. A pool's pods share hardware and engine, which is
//! where a wrong calibration comes from; a pod slower than its peers shows it in its
//! own learned speeds and queue.

use std::collections::HashMap;

/// Weight of each new observation.
const ALPHA: f64 = 0.2;
/// One observation moves the factor by at most `e^(ALPHA × MAX_STEP)` (about ×1.6):
/// an outlier (a stalled connection, a GC pause) cannot swing it alone.
const MAX_STEP: f64 = 2.5;
const MIN_FACTOR: f64 = 0.05;
const MAX_FACTOR: f64 = 50.0;
/// Predictions below this are dominated by fixed overheads that no speed explains.
const MIN_PREDICTED_MS: f64 = 1.0;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct PoolCalibration {
    log_factor: f64,
    observations: u64,
}

/// Per-pool TTFT correction factors, learned from what the proxy observes.
#[derive(Debug, Default)]
pub struct TtftCalibration {
    pools: HashMap<String, PoolCalibration>,
}

impl TtftCalibration {
    /// The factor the pool's time-based predictions are multiplied by (1 until observed).
    pub fn factor(&self, pool: &str) -> f64 {
        self.pools.get(pool).map_or(1.0, |c| c.log_factor.exp().clamp(MIN_FACTOR, MAX_FACTOR))
    }

    /// How many first tokens from this pool have been compared with their prediction.
    pub fn observations(&self, pool: &str) -> u64 {
        self.pools.get(pool).map_or(0, |c| c.observations)
    }

    /// A request routed to `pool` with `predicted_ms` to its first token took
    /// `observed_ms`. Returns `observed − predicted` when the pair was usable.
    pub fn observe(&mut self, pool: &str, predicted_ms: f64, observed_ms: f64) -> Option<f64> {
        let usable = predicted_ms.is_finite()
            && observed_ms.is_finite()
            && predicted_ms >= MIN_PREDICTED_MS
            && observed_ms > 0.0;
        if !usable {
            return None;
        }
        if !self.pools.contains_key(pool) {
            self.pools.insert(pool.to_string(), PoolCalibration::default());
        }
        let entry = self.pools.get_mut(pool)?;
        let step = (observed_ms / predicted_ms).ln().clamp(-MAX_STEP, MAX_STEP);
        entry.log_factor = (entry.log_factor + ALPHA * step).clamp(MIN_FACTOR.ln(), MAX_FACTOR.ln());
        entry.observations += 1;
        Some(observed_ms - predicted_ms)
    }

    /// Pools that left the configuration are forgotten.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.pools.retain(|pool, _| keep(pool));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds a pod whose true times are `truth ×` the uncorrected prediction.
    fn converge(truth: f64, rounds: usize) -> f64 {
        let mut calibration = TtftCalibration::default();
        let base_prediction = 200.0;
        for _ in 0..rounds {
            let predicted = base_prediction * calibration.factor("a");
            calibration.observe("a", predicted, base_prediction * truth);
        }
        calibration.factor("a")
    }

    #[test]
    fn an_unobserved_pool_keeps_its_prediction() {
        let calibration = TtftCalibration::default();
        assert_eq!(calibration.factor("a"), 1.0);
        assert_eq!(calibration.observations("a"), 0);
    }

    #[test]
    fn the_factor_settles_on_pods_ten_times_slower_and_three_times_faster() {
        for truth in [10.0, 1.0 / 3.0] {
            let factor = converge(truth, 40);
            assert!((factor / truth - 1.0).abs() < 0.05, "truth {truth}, factor {factor}");
        }
    }

    #[test]
    fn one_outlier_moves_the_factor_by_a_bounded_step() {
        let mut calibration = TtftCalibration::default();
        calibration.observe("a", 100.0, 1_000_000.0);
        let factor = calibration.factor("a");
        assert!(factor > 1.0 && factor < 1.7, "{factor}");
    }

    #[test]
    fn unusable_pairs_are_ignored() {
        let mut calibration = TtftCalibration::default();
        for (predicted, observed) in [(f64::NAN, 10.0), (100.0, f64::INFINITY), (0.0, 10.0), (100.0, 0.0)] {
            assert_eq!(calibration.observe("a", predicted, observed), None);
        }
        assert_eq!(calibration.observations("a"), 0);
        assert_eq!(calibration.observe("a", 100.0, 150.0), Some(50.0));
    }

    #[test]
    fn pools_that_left_are_forgotten() {
        let mut calibration = TtftCalibration::default();
        calibration.observe("a", 100.0, 300.0);
        calibration.observe("b", 100.0, 300.0);
        calibration.retain(|p| p == "b");
        assert_eq!(calibration.factor("a"), 1.0);
        assert!(calibration.factor("b") > 1.0);
    }
}
