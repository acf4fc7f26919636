//! `calibration-*`: fleets whose metrics mislead the router, to check that it learns
//! the truth from its own first tokens within a minute and herds no prefill meanwhile.
//!
//! - `calibration-slow-10x`: 8 pods 10× slower than Llama-3.1-8B on an H100 (prefill
//!   2,000 tokens/s, decode steps 10× longer) that report the nominal profile's times
//!   (reporting scale 0.1): their metrics say they are 10× faster than they are.
//! - `calibration-fast-3x`: 8 pods 3× faster, reporting 3× slower (scale 3.0).
//! - `calibration-cold-join`: 8 truthful pods; a 9th joins at 60 s, empty and with no
//!   metrics history.
//!
//! Chat-like single turns, Poisson arrivals: prompts of 1,000–3,000 tokens, 60% of them
//! opening with one of 4 shared 500-token system prompts; answers log-normal with a
//! mean of 150 tokens. Loads are given as fractions of the fleet's true capacity (the
//! first 8 pods'), so every case runs at the same utilization; a step's x value is the
//! arrival rate this makes, in requests per second. The run is
//! measured from 60 s on (`calibration::CalibrationResult`). The oracle is not run.

use infergate_model_sim::engine::EngineProfile;

use super::{BASE_MODEL, CalibrationPlan, LoadStep, Scenario, Workload, lognormal, poisson};
use crate::request::{Arrival, BenchRequest, render, text};

/// The 8 nominal pods' capacity on this traffic, requests per second. On the fast
/// fleet (3× this) over 180 s, round robin's TTFT p90 is 51 ms at 65% of it, 128 ms
/// at 90%, and 8.3 s at 100%, where the queues grow without bound.
pub const NOMINAL_CAPACITY_RPS: f64 = 85.0;
/// The window the router has to learn in before it is measured, seconds.
pub const LEARN_S: f64 = 60.0;
const PODS: usize = 8;
const SYSTEM_PROMPTS: usize = 4;
const SYSTEM_TOKENS: usize = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CalibrationCase {
    Slow10x,
    Fast3x,
    ColdJoin,
}

impl CalibrationCase {
    /// How much faster the pods truly are than the nominal profile.
    fn speed(self) -> f64 {
        match self {
            CalibrationCase::Slow10x => 0.1,
            CalibrationCase::Fast3x => 3.0,
            CalibrationCase::ColdJoin => 1.0,
        }
    }
}

pub struct Calibration {
    pub case: CalibrationCase,
    /// Loads to run, as fractions of the first 8 pods' true capacity.
    pub loads: Vec<f64>,
    pub duration_s: f64,
}

impl Calibration {
    /// The case at 65% of true capacity, for 180 s; the slow fleet, which serves a
    /// tenth of the requests per second, for 600 s, so that its measured window holds
    /// about 2,900 requests rather than 660 (with 660, round robin's busiest pod held
    /// 1.6× its fair share of the queued prefill by chance alone; 1.22× with 2,900).
    pub fn standard(case: CalibrationCase) -> Self {
        let duration_s = if case == CalibrationCase::Slow10x { 600.0 } else { 180.0 };
        Self { case, loads: vec![0.65], duration_s }
    }
}

/// `profile` run `speed` times faster: every time it takes divided by `speed`.
fn scaled(profile: EngineProfile, speed: f64) -> EngineProfile {
    EngineProfile {
        prefill_tokens_per_s: profile.prefill_tokens_per_s * speed,
        itl_base_ms: profile.itl_base_ms / speed,
        itl_per_seq_ms: profile.itl_per_seq_ms / speed,
        lora_load_ms: profile.lora_load_ms / speed,
        attention_ns_per_pair: profile.attention_ns_per_pair / speed,
        kv_read_ns_per_token: profile.kv_read_ns_per_token / speed,
        ..profile
    }
}

impl Workload for Calibration {
    fn name(&self) -> &'static str {
        match self.case {
            CalibrationCase::Slow10x => "calibration-slow-10x",
            CalibrationCase::Fast3x => "calibration-fast-3x",
            CalibrationCase::ColdJoin => "calibration-cold-join",
        }
    }

    /// Each load's arrival rate, requests per second.
    fn steps(&self) -> Vec<LoadStep> {
        let capacity = NOMINAL_CAPACITY_RPS * self.case.speed();
        self.loads.iter().map(|&load| LoadStep { qps: load * capacity }).collect()
    }

    /// Not the oracle: it reads every engine's exact state, so metrics that lie and a
    /// pod with no history change nothing for it, and copying every pod's engine for
    /// each of 30,000 requests (`calibration-fast-3x`) takes minutes.
    fn runs_policy(&self, policy: &str) -> bool {
        policy != "oracle" && policy != "gie_lora"
    }

    fn scenario(&self, step: LoadStep, seed: u64) -> Scenario {
        let mut rng = fastrand::Rng::with_seed(seed);
        let speed = self.case.speed();
        let systems: Vec<String> = (0..SYSTEM_PROMPTS).map(|_| text(&mut rng, SYSTEM_TOKENS * 4)).collect();
        let requests = poisson(&mut rng, step.qps, 0.0, self.duration_s)
            .into_iter()
            .map(|at| {
                let prompt_tokens = rng.usize(1_000..=3_000);
                let system = (rng.f64() < 0.6).then(|| systems[rng.usize(..SYSTEM_PROMPTS)].as_str());
                let user_tokens = prompt_tokens - system.map_or(0, |_| SYSTEM_TOKENS);
                let user = text(&mut rng, user_tokens * 4);
                let output = lognormal(&mut rng, 150.0, 0.6).clamp(8.0, 1_000.0) as u32;
                let prompt = match system {
                    Some(system) => render(&[("system", system), ("user", &user)]),
                    None => render(&[("user", &user)]),
                };
                BenchRequest {
                    arrival: Arrival::At(at),
                    model: BASE_MODEL.into(),
                    adapter: None,
                    prompt: prompt.into(),
                    output_tokens: output,
                    session: None,
                }
            })
            .collect();
        let (pods, join_at_s) = match self.case {
            CalibrationCase::ColdJoin => (PODS + 1, vec![LEARN_S]),
            _ => (PODS, Vec::new()),
        };
        Scenario {
            pods,
            profile: scaled(EngineProfile::LLAMA_3_1_8B_H100, speed),
            adapters: Vec::new(),
            requests,
            duration_s: self.duration_s,
            calibration: CalibrationPlan {
                // The pods report the nominal profile's times, whatever their speed.
                reporting_time_scale: speed,
                join_at_s,
                measure_from_s: Some(LEARN_S),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slow_fleet_is_the_nominal_one_ten_times_slower_and_reports_it_nominal() {
        let slow_workload = Calibration::standard(CalibrationCase::Slow10x);
        let slow = slow_workload.scenario(slow_workload.steps()[0], 1);
        let nominal = EngineProfile::LLAMA_3_1_8B_H100;
        let ratio = slow.profile.step_seconds(10, 2_000) / nominal.step_seconds(10, 2_000);
        assert!((ratio - 10.0).abs() < 1e-9, "{ratio}");
        assert_eq!(slow.calibration.reporting_time_scale, 0.1);
        let fast_workload = Calibration::standard(CalibrationCase::Fast3x);
        let fast = fast_workload.scenario(fast_workload.steps()[0], 1);
        let rate = |s: &Scenario| s.requests.len() as f64 / s.duration_s;
        assert!(rate(&fast) > 25.0 * rate(&slow), "30× the arrival rate");
    }

    #[test]
    fn the_ninth_pod_joins_after_the_first_minute() {
        let join = Calibration::standard(CalibrationCase::ColdJoin).scenario(LoadStep { qps: 55.0 }, 1);
        assert_eq!((join.pods, join.calibration.present(join.pods, 59.9)), (9, 8));
        assert_eq!(join.calibration.present(join.pods, LEARN_S), 9);
        assert_eq!(join.calibration.reporting_time_scale, 1.0);
    }
}
