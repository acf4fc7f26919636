//! `multi-lora`, after the Gateway API Inference Extension's regression suite: 10 pods
//! with 3 LoRA slots each; 15 adapters with traffic split 5×12%, 5×6% and 5×2%.

use infergate_model_sim::engine::EngineProfile;

use super::{CalibrationPlan, LoadStep, Scenario, Workload, lognormal, poisson, weighted_index};
use crate::request::{Arrival, BenchRequest, render, text};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoraVariant {
    /// Prompts of about 1,500 tokens, answers of about 150.
    PrefillHeavy,
    /// Prompts of about 200 tokens, answers of about 600.
    DecodeHeavy,
}

pub struct MultiLora {
    pub variant: LoraVariant,
    pub qps_steps: Vec<f64>,
    pub duration_s: f64,
}

impl Workload for MultiLora {
    fn name(&self) -> &'static str {
        match self.variant {
            LoraVariant::PrefillHeavy => "multi-lora-prefill",
            LoraVariant::DecodeHeavy => "multi-lora-decode",
        }
    }

    /// Every policy, `gie_lora` (the LoRA profile) included.
    fn runs_policy(&self, _policy: &str) -> bool {
        true
    }

    fn steps(&self) -> Vec<LoadStep> {
        self.qps_steps.iter().map(|&qps| LoadStep { qps }).collect()
    }

    fn scenario(&self, step: LoadStep, seed: u64) -> Scenario {
        let mut rng = fastrand::Rng::with_seed(seed);
        let adapters: Vec<String> = (0..15).map(|i| format!("adapter-{i:02}")).collect();
        let weights: Vec<f64> = (0..15).map(|i| [12.0, 6.0, 2.0][i / 5]).collect();
        let (prompt_mean, output_mean) = match self.variant {
            LoraVariant::PrefillHeavy => (1_500.0, 150.0),
            LoraVariant::DecodeHeavy => (200.0, 600.0),
        };
        let requests = poisson(&mut rng, step.qps, 0.0, self.duration_s)
            .into_iter()
            .map(|at| {
                let adapter = adapters[weighted_index(&mut rng, &weights)].clone();
                let prompt_tokens = lognormal(&mut rng, prompt_mean, 0.4).clamp(16.0, 8_000.0) as usize;
                let output = lognormal(&mut rng, output_mean, 0.4).clamp(4.0, 4_000.0) as u32;
                BenchRequest {
                    arrival: Arrival::At(at),
                    model: adapter.clone(),
                    adapter: Some(adapter),
                    prompt: render(&[("user", &text(&mut rng, prompt_tokens * 4))]).into(),
                    output_tokens: output,
                    session: None,
                }
            })
            .collect();
        Scenario {
            pods: 10,
            profile: EngineProfile { max_loras: 3, ..EngineProfile::LLAMA_3_1_8B_H100 },
            adapters,
            requests,
            duration_s: self.duration_s,
            calibration: CalibrationPlan::NONE,
        }
    }
}
