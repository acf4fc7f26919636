//! `multi-round-chat`, after vLLM production-stack's multi-round QA benchmark: users
//! with a 1,000-token shared system prompt ask 10 rounds each; every round carries the
//! whole history; answers are 100 tokens. Each user's next round follows its previous
//! answer (closed loop), spaced so that the fleet sees about `qps` requests per second.

use infergate_model_sim::engine::EngineProfile;

use super::{BASE_MODEL, CalibrationPlan, LoadStep, Scenario, Workload};
use crate::request::{Arrival, BenchRequest, answer, render, text};

pub struct MultiRoundChat {
    pub users: usize,
    pub rounds: usize,
    pub qps_steps: Vec<f64>,
}

const ANSWER_TOKENS: u32 = 100;
const QUESTION_TOKENS: usize = 100;

impl Workload for MultiRoundChat {
    fn name(&self) -> &'static str {
        "multi-round-chat"
    }

    fn steps(&self) -> Vec<LoadStep> {
        self.qps_steps.iter().map(|&qps| LoadStep { qps }).collect()
    }

    fn scenario(&self, step: LoadStep, seed: u64) -> Scenario {
        let mut rng = fastrand::Rng::with_seed(seed);
        let system = text(&mut rng, 1_000 * 4);
        // Each user sends one request every `users / qps` seconds on average.
        let gap = self.users as f64 / step.qps.max(1e-9);
        let mut requests = Vec::with_capacity(self.users * self.rounds);
        for _ in 0..self.users {
            let start = rng.f64() * gap;
            let mut history: Vec<(String, String)> = vec![("system".into(), system.clone())];
            let mut previous: Option<usize> = None;
            for _ in 0..self.rounds {
                history.push(("user".into(), text(&mut rng, QUESTION_TOKENS * 4)));
                let messages: Vec<(&str, &str)> = history.iter().map(|(r, c)| (r.as_str(), c.as_str())).collect();
                let arrival = match previous {
                    None => Arrival::At(start),
                    Some(previous) => Arrival::After { previous, think_s: gap * (0.5 + rng.f64()) },
                };
                previous = Some(requests.len());
                requests.push(BenchRequest {
                    arrival,
                    model: BASE_MODEL.into(),
                    adapter: None,
                    prompt: render(&messages).into(),
                    output_tokens: ANSWER_TOKENS,
                    session: None,
                });
                history.push(("assistant".into(), answer(ANSWER_TOKENS)));
            }
        }
        Scenario {
            pods: 8,
            profile: EngineProfile::LLAMA_3_1_8B_H100,
            adapters: Vec::new(),
            requests,
            duration_s: gap * self.rounds as f64 * 1.5,
            calibration: CalibrationPlan::NONE,
        }
    }
}
