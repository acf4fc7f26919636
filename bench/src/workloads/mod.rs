//! The workloads, each a named generator with a seed. Where a published benchmark
//! exists, the parameters are its own (see BENCHMARKS.md for the sources).

mod agentic;
mod bursty_chat;
mod calibration;
mod multi_lora;
mod multi_round_chat;
mod shared_prefix;
mod trace_replay;

use infergate_model_sim::engine::EngineProfile;
use serde::Serialize;

pub use agentic::{Agentic, AgenticError, Scaling, scaled};
pub use bursty_chat::BurstyChat;
pub use calibration::{Calibration, CalibrationCase};
pub use multi_lora::{LoraVariant, MultiLora};
pub use multi_round_chat::MultiRoundChat;
pub use shared_prefix::SharedPrefix;
pub use trace_replay::{TraceError, TraceRecord, TraceReplay};

use crate::request::BenchRequest;

/// The base model name every workload serves; adapters are further model names.
pub const BASE_MODEL: &str = "base";

/// A fleet and a request stream for one load step.
pub struct Scenario {
    pub pods: usize,
    pub profile: EngineProfile,
    pub adapters: Vec<String>,
    pub requests: Vec<BenchRequest>,
    /// Arrivals stop here: a conversation's next turn due later is not sent (nor
    /// counted); the run continues until every sent request finished.
    pub duration_s: f64,
    /// Pods whose metrics lie, pods that join under way, and from when the run measures
    /// how the router copes; [`CalibrationPlan::NONE`] for a truthful, fixed fleet.
    pub calibration: CalibrationPlan,
}

/// How a scenario's fleet departs from truthful pods that are all there from the start,
/// and from when the run measures how the router copes.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationPlan {
    /// Every pod reports its latency histograms times this: 1.0 is truthful, 0.1 a pod
    /// whose metrics say it is 10× faster than it is (see `Engine::reporting_time_scale`).
    pub reporting_time_scale: f64,
    /// The last `join_at_s.len()` pods join the fleet under way, one after the other at
    /// these times: before its time a pod is in no scrape or snapshot and no policy can
    /// pick it; it joins empty, with no metrics history. A pod joins no earlier than
    /// the one before it.
    pub join_at_s: Vec<f64>,
    /// From this time on, the run also measures the router's TTFT predictions and each
    /// pod's share of the queued prefill (`calibration::CalibrationResult`); `None`
    /// leaves the results as they were.
    pub measure_from_s: Option<f64>,
}

impl CalibrationPlan {
    /// Truthful pods, all there from the start; nothing extra measured.
    pub const NONE: Self = Self { reporting_time_scale: 1.0, join_at_s: Vec::new(), measure_from_s: None };

    /// How many pods of a fleet of `pods` are in it at `now`: the first ones, since
    /// joiners are the last pods (a join time that is not a number never comes).
    pub fn present(&self, pods: usize, now: f64) -> usize {
        let joiners = self.join_at_s.len().min(pods);
        let joined = self.join_at_s.iter().take(joiners).take_while(|&&t| t <= now).count();
        pods - joiners + joined
    }
}

/// One point of a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LoadStep {
    /// The x-axis value: requests per second offered (or base rate for bursts, or
    /// replay speed for a trace).
    pub qps: f64,
}

pub trait Workload: Sync {
    fn name(&self) -> &'static str;
    fn steps(&self) -> Vec<LoadStep>;
    fn scenario(&self, step: LoadStep, seed: u64) -> Scenario;
    /// Whether the policy of this name is run on this workload: all are by default,
    /// but `gie_lora`, the LoRA profile, which only the LoRA workloads run.
    fn runs_policy(&self, policy: &str) -> bool {
        policy != "gie_lora"
    }
}

/// Poisson arrival times at `qps` over `[start, end)`.
pub fn poisson(rng: &mut fastrand::Rng, qps: f64, start: f64, end: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut t = start;
    loop {
        t += -(1.0 - rng.f64()).ln() / qps.max(1e-9);
        if t >= end {
            return out;
        }
        out.push(t);
    }
}

/// A log-normal sample with the given mean and sigma of the underlying normal.
pub fn lognormal(rng: &mut fastrand::Rng, mean: f64, sigma: f64) -> f64 {
    let mu = mean.ln() - sigma * sigma / 2.0;
    let (u1, u2) = (1.0 - rng.f64(), rng.f64());
    let normal = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    (mu + sigma * normal).exp()
}

/// Index drawn with probability proportional to `weights`.
pub fn weighted_index(rng: &mut fastrand::Rng, weights: &[f64]) -> usize {
    let total: f64 = weights.iter().sum();
    let mut x = rng.f64() * total;
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    weights.len().saturating_sub(1)
}
