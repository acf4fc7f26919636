//! `shared-prefix`, after llm-d's "KV-cache wins" benchmark: 8 pods with 307,328 KV
//! tokens each (block size 64); 150 groups sharing a 6,000-token prefix; 5 users per
//! group asking unique 1,200-token questions; 192 output tokens; Poisson arrivals.

use infergate_model_sim::engine::EngineProfile;

use super::{BASE_MODEL, CalibrationPlan, LoadStep, Scenario, Workload, poisson};
use crate::request::{Arrival, BenchRequest, render, text};

pub struct SharedPrefix {
    pub groups: usize,
    pub users_per_group: usize,
    pub qps_steps: Vec<f64>,
    pub duration_s: f64,
}

impl SharedPrefix {
    pub fn published(qps_steps: Vec<f64>, duration_s: f64) -> Self {
        Self { groups: 150, users_per_group: 5, qps_steps, duration_s }
    }
}

impl Workload for SharedPrefix {
    fn name(&self) -> &'static str {
        "shared-prefix"
    }

    fn steps(&self) -> Vec<LoadStep> {
        self.qps_steps.iter().map(|&qps| LoadStep { qps }).collect()
    }

    fn scenario(&self, step: LoadStep, seed: u64) -> Scenario {
        let mut rng = fastrand::Rng::with_seed(seed);
        let prefixes: Vec<String> = (0..self.groups).map(|_| text(&mut rng, 6_000 * 4)).collect();
        let requests = poisson(&mut rng, step.qps, 0.0, self.duration_s)
            .into_iter()
            .map(|at| {
                let group = rng.usize(..self.groups);
                let user = rng.usize(..self.users_per_group);
                let question = format!("user {user}: {}", text(&mut rng, 1_200 * 4));
                BenchRequest {
                    arrival: Arrival::At(at),
                    model: BASE_MODEL.into(),
                    adapter: None,
                    prompt: render(&[("system", &prefixes[group]), ("user", &question)]).into(),
                    output_tokens: 192,
                    session: None,
                }
            })
            .collect();
        Scenario {
            pods: 8,
            profile: EngineProfile { num_gpu_blocks: 307_328 / 64, block_size: 64, ..EngineProfile::LLAMA_3_1_8B_H100 },
            adapters: Vec::new(),
            requests,
            duration_s: self.duration_s,
            calibration: CalibrationPlan::NONE,
        }
    }
}
