//! What the `calibration` scenarios measure, beside the usual latencies: how far the
//! router's predicted TTFT is from the one observed once it has had a minute to learn,
//! and whether a wrong prediction piles prefill onto one pod.
//!
//! - **Prediction error**: over the requests routed from the window's start, the median
//!   of `|predicted − observed| / observed`, and the median of `predicted / observed`,
//!   which says which way the predictions lean. Only a policy that predicts (infergate)
//!   has these.
//! - **Queued prefill share**: every 100 ms scrape in the window, while the whole fleet
//!   is present and arrivals last, each pod's queued prefill is read off its engine:
//!   the prompts of its requests waiting or mid-prefill, in KV blocks
//!   (`Engine::load_blocks`; the engine exposes whole prompts, so a cached prefix still
//!   counts). A pod's share is its sum over the fleet's; divided by the fair share
//!   `1 / pods`, it is 1 for a perfectly even fleet. The largest ratio is reported.

use infergate_model_sim::engine::Engine;
use serde::Serialize;

use crate::results::{Percentiles, RequestOutcome, round3, ttft_percentiles};

/// One request's predicted and observed time to first token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TtftPrediction {
    /// When it was routed, seconds of virtual time.
    pub routed_at_s: f64,
    /// The pod it went to.
    pub pod: usize,
    pub predicted_ms: f64,
    /// From the routing decision to the first token.
    pub observed_ms: f64,
}

/// Each pod's queued prefill, summed over the samples taken.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PrefillShares {
    queued_blocks: Vec<f64>,
    samples: usize,
}

impl PrefillShares {
    pub fn new(pods: usize) -> Self {
        Self { queued_blocks: vec![0.0; pods], samples: 0 }
    }

    /// Reads the queued prefill of each pod; skipped unless `engines` is the whole fleet.
    pub fn sample(&mut self, engines: &[Engine]) {
        if engines.len() != self.queued_blocks.len() {
            return;
        }
        for (sum, engine) in self.queued_blocks.iter_mut().zip(engines) {
            *sum += engine.load_blocks().0 as f64;
        }
        self.samples += 1;
    }

    /// Per pod, its share of the queued prefill over the fair share; all 0 when nothing
    /// was ever queued.
    pub fn ratios_to_fair(&self) -> Vec<f64> {
        let total: f64 = self.queued_blocks.iter().sum();
        let pods = self.queued_blocks.len() as f64;
        self.queued_blocks.iter().map(|q| if total > 0.0 { q / total * pods } else { 0.0 }).collect()
    }
}

/// The calibration measurements of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationResult {
    /// The window starts here, seconds.
    pub from_s: f64,
    /// TTFT of the requests that arrived in the window.
    pub ttft_ms: Percentiles,
    /// Requests routed in the window whose first token was compared with a prediction.
    pub predictions: usize,
    /// Median `|predicted − observed| / observed` over them.
    pub ttft_error_median: Option<f64>,
    /// Median `predicted / observed`: below 1 when predictions are too optimistic.
    pub predicted_over_observed_median: Option<f64>,
    /// Scrapes at which the queued prefill was read.
    pub prefill_samples: usize,
    /// Per pod, its time-averaged share of the fleet's queued prefill over `1 / pods`.
    pub prefill_share_ratios: Vec<f64>,
    /// The largest of them.
    pub prefill_share_max_ratio: f64,
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => values.get(n / 2).copied(),
        _ => Some((values.get(n / 2 - 1)? + values.get(n / 2)?) / 2.0),
    }
}

impl CalibrationResult {
    pub fn measure(
        from_s: f64,
        predictions: Option<&[TtftPrediction]>,
        outcomes: &[RequestOutcome],
        shares: &PrefillShares,
    ) -> Self {
        let in_window: Vec<&TtftPrediction> = predictions
            .unwrap_or_default()
            .iter()
            .filter(|p| p.routed_at_s >= from_s && p.observed_ms > 0.0 && p.predicted_ms.is_finite())
            .collect();
        let error = median(in_window.iter().map(|p| (p.predicted_ms - p.observed_ms).abs() / p.observed_ms).collect());
        let lean = median(in_window.iter().map(|p| p.predicted_ms / p.observed_ms).collect());
        let ratios: Vec<f64> = shares.ratios_to_fair().into_iter().map(round3).collect();
        let sent = outcomes.iter().filter(|o| !o.not_sent && !o.shed && o.arrival >= from_s);
        Self {
            from_s,
            ttft_ms: ttft_percentiles(sent),
            predictions: in_window.len(),
            ttft_error_median: error.map(round3),
            predicted_over_observed_median: lean.map(round3),
            prefill_samples: shares.samples,
            prefill_share_max_ratio: ratios.iter().copied().fold(0.0, f64::max),
            prefill_share_ratios: ratios,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_error_is_relative_to_the_observed_time_and_skips_the_first_minute() {
        let p =
            |routed_at_s, predicted_ms, observed_ms| TtftPrediction { routed_at_s, pod: 0, predicted_ms, observed_ms };
        let predictions = [p(10.0, 1.0, 1000.0), p(61.0, 90.0, 100.0), p(62.0, 150.0, 100.0), p(63.0, 100.0, 100.0)];
        let result = CalibrationResult::measure(60.0, Some(&predictions), &[], &PrefillShares::new(2));
        assert_eq!(result.predictions, 3);
        assert_eq!(result.ttft_error_median, Some(0.1), "errors 0.1, 0.5 and 0");
        assert_eq!(result.predicted_over_observed_median, Some(1.0));
        let none = CalibrationResult::measure(60.0, None, &[], &PrefillShares::new(2));
        assert_eq!((none.predictions, none.ttft_error_median), (0, None));
    }

    #[test]
    fn an_even_fleet_has_ratios_of_one_and_a_partial_fleet_is_not_sampled() {
        let mut shares = PrefillShares::new(2);
        shares.queued_blocks = vec![30.0, 10.0];
        shares.samples = 1;
        assert_eq!(shares.ratios_to_fair(), [1.5, 0.5]);
        let engines: Vec<Engine> =
            (0..1).map(|_| Engine::new(infergate_model_sim::engine::EngineProfile::TINY)).collect();
        shares.sample(&engines);
        assert_eq!(shares.samples, 1, "one pod of two is not the fleet");
        assert_eq!(PrefillShares::new(3).ratios_to_fair(), [0.0; 3]);
    }
}
