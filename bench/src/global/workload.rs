//! Two regions' clients: east is the busy region, with a burst in the middle of the
//! run that its own cluster cannot absorb; west is steady and lightly loaded. A share
//! of each region's requests is batch (sheddable, long target).

use infergate_model_sim::engine::EngineProfile;

use crate::request::{Arrival, BenchRequest, render, text};
use crate::workloads::{BASE_MODEL, CalibrationPlan, Scenario, lognormal, poisson};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    East,
    West,
}

impl Region {
    pub fn index(self) -> usize {
        match self {
            Region::East => 0,
            Region::West => 1,
        }
    }
}

/// What the global router knows of a request beyond its body.
#[derive(Debug, Clone, Copy)]
pub struct Tags {
    pub origin: Region,
    pub batch: bool,
}

pub struct TwoRegions {
    pub pods_per_cluster: usize,
    pub duration_s: f64,
    /// East's rate outside the burst, and inside it.
    pub east_qps: f64,
    pub east_burst_qps: f64,
    /// The burst's start and end, seconds.
    pub burst: (f64, f64),
    pub west_qps: f64,
    pub batch_share: f64,
}

impl TwoRegions {
    /// The benchmark's scenario: 2 × 4 pods; east's clients at 20 requests/s with a
    /// 30 s burst to 60/s, more than east's cluster serves; west's at a steady 10/s.
    pub fn standard() -> Self {
        Self {
            pods_per_cluster: 4,
            duration_s: 120.0,
            east_qps: 20.0,
            east_burst_qps: 60.0,
            burst: (40.0, 70.0),
            west_qps: 10.0,
            batch_share: 0.2,
        }
    }

    pub fn scenario(&self, seed: u64) -> (Scenario, Vec<Tags>) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut arrivals: Vec<(f64, Region)> = Vec::new();
        let (start, end) = self.burst;
        for (from, to, qps) in
            [(0.0, start, self.east_qps), (start, end, self.east_burst_qps), (end, self.duration_s, self.east_qps)]
        {
            arrivals.extend(poisson(&mut rng, qps, from, to).into_iter().map(|t| (t, Region::East)));
        }
        arrivals.extend(poisson(&mut rng, self.west_qps, 0.0, self.duration_s).into_iter().map(|t| (t, Region::West)));
        arrivals.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut requests = Vec::with_capacity(arrivals.len());
        let mut tags = Vec::with_capacity(arrivals.len());
        for (at, origin) in arrivals {
            let batch = rng.f64() < self.batch_share;
            let prompt_tokens = rng.usize(200..1_500);
            let output = lognormal(&mut rng, 150.0, 0.6).clamp(8.0, 1_000.0) as u32;
            let prompt = render(&[("user", &text(&mut rng, prompt_tokens * 4))]);
            requests.push(BenchRequest {
                arrival: Arrival::At(at),
                model: BASE_MODEL.into(),
                adapter: None,
                prompt: prompt.into(),
                output_tokens: output,
                session: None,
            });
            tags.push(Tags { origin, batch });
        }
        let scenario = Scenario {
            pods: self.pods_per_cluster * 2,
            profile: EngineProfile::LLAMA_3_1_8B_H100,
            adapters: Vec::new(),
            requests,
            duration_s: self.duration_s,
            calibration: CalibrationPlan::NONE,
        };
        (scenario, tags)
    }
}
