//! `bursty-chat`, the seed's chatbot under traffic spikes: 8 pods; 3 applications with
//! 2,000-token system prompts; users hold 1–10-turn conversations; 8 LoRA adapters with
//! Zipf(1.1) popularity and 2 slots per pod; 10% long generations (2,000 tokens), the
//! rest log-normal with a mean of 200; a base load at 60% of fleet capacity with 20 s
//! bursts to 130% every 60 s.

use infergate_model_sim::engine::EngineProfile;

use super::{BASE_MODEL, CalibrationPlan, LoadStep, Scenario, Workload, lognormal, poisson, weighted_index};
use crate::request::{Arrival, BenchRequest, answer, render, text};

pub struct BurstyChat {
    pub pods: usize,
    /// Fleet capacity in conversations started per second (see BENCHMARKS.md).
    pub capacity_conversations_per_s: f64,
    pub duration_s: f64,
    /// Multipliers of capacity to sweep; 0.6 is the published base load.
    pub base_loads: Vec<f64>,
    /// A burst of `burst_s` starts every `period_s` (published: 20 s every 60 s).
    pub period_s: f64,
    pub burst_s: f64,
}

const BURST_FACTOR: f64 = 1.3 / 0.6;

impl BurstyChat {
    pub fn published(capacity_conversations_per_s: f64, duration_s: f64, base_loads: Vec<f64>) -> Self {
        Self { pods: 8, capacity_conversations_per_s, duration_s, base_loads, period_s: 60.0, burst_s: 20.0 }
    }
}

impl Workload for BurstyChat {
    fn name(&self) -> &'static str {
        "bursty-chat"
    }

    fn steps(&self) -> Vec<LoadStep> {
        self.base_loads.iter().map(|&load| LoadStep { qps: load * self.capacity_conversations_per_s }).collect()
    }

    fn scenario(&self, step: LoadStep, seed: u64) -> Scenario {
        let mut rng = fastrand::Rng::with_seed(seed);
        let systems: Vec<String> = (0..3).map(|_| text(&mut rng, 2_000 * 4)).collect();
        let adapters: Vec<String> = (0..8).map(|i| format!("chat-lora-{i}")).collect();
        let zipf: Vec<f64> = (1..=8).map(|k| 1.0 / f64::from(k).powf(1.1)).collect();
        // Conversation starts: base rate, × burst factor during each period's burst,
        // which sits in the middle of the period's second half.
        let mut starts = Vec::new();
        let mut t = 0.0;
        let slice = self.period_s / 12.0;
        let burst_start = self.period_s / 2.0;
        while t < self.duration_s {
            let phase = t % self.period_s;
            let in_burst = phase >= burst_start && phase < burst_start + self.burst_s;
            let rate = step.qps * if in_burst { BURST_FACTOR } else { 1.0 };
            let end = (t + slice).min(self.duration_s);
            starts.extend(poisson(&mut rng, rate, t, end));
            t = end;
        }
        let mut requests = Vec::new();
        for start in starts {
            let app = rng.usize(..3);
            // Half the traffic is on the base model, half on an adapter.
            let adapter = (rng.f64() < 0.5).then(|| adapters[weighted_index(&mut rng, &zipf)].clone());
            let turns = rng.usize(1..=10);
            let mut history: Vec<(String, String)> = vec![("system".into(), systems[app].clone())];
            let mut previous: Option<usize> = None;
            for _ in 0..turns {
                let question_tokens = rng.usize(20..200);
                history.push(("user".into(), text(&mut rng, question_tokens * 4)));
                let output =
                    if rng.f64() < 0.1 { 2_000 } else { lognormal(&mut rng, 200.0, 0.6).clamp(8.0, 1_500.0) as u32 };
                let messages: Vec<(&str, &str)> = history.iter().map(|(r, c)| (r.as_str(), c.as_str())).collect();
                let arrival = match previous {
                    None => Arrival::At(start),
                    Some(previous) => Arrival::After { previous, think_s: 2.0 + 8.0 * rng.f64() },
                };
                previous = Some(requests.len());
                requests.push(BenchRequest {
                    arrival,
                    model: adapter.clone().unwrap_or_else(|| BASE_MODEL.into()),
                    adapter: adapter.clone(),
                    prompt: render(&messages).into(),
                    output_tokens: output,
                    session: None,
                });
                history.push(("assistant".into(), answer(output.min(300))));
            }
        }
        Scenario {
            pods: self.pods,
            profile: EngineProfile { max_loras: 2, ..EngineProfile::LLAMA_3_1_8B_H100 },
            adapters,
            requests,
            duration_s: self.duration_s,
            calibration: CalibrationPlan::NONE,
        }
    }
}
