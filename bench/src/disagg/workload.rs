//! The P/D benchmark's own workloads; the third, `agentic`, is the main suite's.
//!
//! - `llm-d-guide`: the shape of llm-d's P/D guide (`guides/pd-disaggregation`): random
//!   5,000-token prompts, 250 output tokens, Poisson arrivals at a fixed rate.
//! - `mixed-chat`: chat conversations with short prompts beside long one-shot
//!   documents, so that a split decision has both kinds to tell apart: 70% of
//!   requests start a chat (one of 16 system prompts of 300 tokens, a question of
//!   about 300 tokens, 1–4 turns 2–10 s apart, about 200 output tokens), 30% are a
//!   document of about 6,000 tokens (2,000–16,000) with a short question and about
//!   250 output tokens.
//!
//! Both on 8 pods of Llama-3.1-8B on one H100 each, the long-context calibration
//! (`EngineProfile::LLAMA_3_1_8B_H100_LONG`).

use infergate_model_sim::engine::EngineProfile;

use crate::request::{Arrival, BenchRequest, answer, render, text};
use crate::workloads::{BASE_MODEL, CalibrationPlan, LoadStep, Scenario, Workload, lognormal, poisson};

const PODS: usize = 8;
const PROFILE: EngineProfile = EngineProfile::LLAMA_3_1_8B_H100_LONG;
/// Bytes per pseudo-token of the bench's prompts.
const BYTES_PER_TOKEN: usize = 4;

/// llm-d's P/D guide: ISL 5,000, OSL 250, Poisson at each rate.
pub struct GuideShape {
    pub rates: Vec<f64>,
    pub duration_s: f64,
}

pub const GUIDE_PROMPT_TOKENS: usize = 5_000;
pub const GUIDE_OUTPUT_TOKENS: u32 = 250;

impl Workload for GuideShape {
    fn name(&self) -> &'static str {
        "llm-d-guide"
    }

    fn steps(&self) -> Vec<LoadStep> {
        self.rates.iter().map(|&qps| LoadStep { qps }).collect()
    }

    fn scenario(&self, step: LoadStep, seed: u64) -> Scenario {
        let mut rng = fastrand::Rng::with_seed(seed);
        // `<|user|>` takes the first 8 bytes of the 5,000 tokens.
        let body = GUIDE_PROMPT_TOKENS * BYTES_PER_TOKEN - render(&[("user", "")]).len();
        let requests = poisson(&mut rng, step.qps, 0.0, self.duration_s)
            .into_iter()
            .map(|at| BenchRequest {
                arrival: Arrival::At(at),
                model: BASE_MODEL.into(),
                adapter: None,
                prompt: render(&[("user", &text(&mut rng, body))]).into(),
                output_tokens: GUIDE_OUTPUT_TOKENS,
                session: None,
            })
            .collect();
        scenario(requests, self.duration_s)
    }
}

/// Short chat conversations beside long documents (see the module doc).
pub struct MixedChat {
    /// Requests per second that start a chat or send a document.
    pub rates: Vec<f64>,
    pub duration_s: f64,
}

/// The share of starts that are a long document.
pub const LONG_SHARE: f64 = 0.3;

impl Workload for MixedChat {
    fn name(&self) -> &'static str {
        "mixed-chat"
    }

    fn steps(&self) -> Vec<LoadStep> {
        self.rates.iter().map(|&qps| LoadStep { qps }).collect()
    }

    fn scenario(&self, step: LoadStep, seed: u64) -> Scenario {
        let mut rng = fastrand::Rng::with_seed(seed);
        let tokens = |n: f64| n.round() as usize * BYTES_PER_TOKEN;
        let systems: Vec<String> = (0..16).map(|_| text(&mut rng, tokens(300.0))).collect();
        let mut requests = Vec::new();
        for start in poisson(&mut rng, step.qps, 0.0, self.duration_s) {
            if rng.f64() < LONG_SHARE {
                let document_tokens = lognormal(&mut rng, 6_000.0, 0.5).clamp(2_000.0, 16_000.0);
                let document = text(&mut rng, tokens(document_tokens));
                let question = text(&mut rng, tokens(40.0));
                requests.push(BenchRequest {
                    arrival: Arrival::At(start),
                    model: BASE_MODEL.into(),
                    adapter: None,
                    prompt: render(&[("user", &document), ("user", &question)]).into(),
                    output_tokens: lognormal(&mut rng, 250.0, 0.5).clamp(16.0, 1_000.0) as u32,
                    session: None,
                });
                continue;
            }
            let mut history: Vec<(String, String)> = vec![("system".into(), systems[rng.usize(..16)].clone())];
            let mut previous: Option<usize> = None;
            for _ in 0..rng.usize(1..=4) {
                let question_tokens = lognormal(&mut rng, 300.0, 0.8).clamp(16.0, 2_000.0);
                history.push(("user".into(), text(&mut rng, tokens(question_tokens))));
                let output = lognormal(&mut rng, 200.0, 0.6).clamp(16.0, 1_000.0) as u32;
                let messages: Vec<(&str, &str)> = history.iter().map(|(r, c)| (r.as_str(), c.as_str())).collect();
                let arrival = match previous {
                    None => Arrival::At(start),
                    Some(previous) => Arrival::After { previous, think_s: 2.0 + 8.0 * rng.f64() },
                };
                previous = Some(requests.len());
                requests.push(BenchRequest {
                    arrival,
                    model: BASE_MODEL.into(),
                    adapter: None,
                    prompt: render(&messages).into(),
                    output_tokens: output,
                    session: None,
                });
                history.push(("assistant".into(), answer(output)));
            }
        }
        scenario(requests, self.duration_s)
    }
}

fn scenario(requests: Vec<BenchRequest>, duration_s: f64) -> Scenario {
    Scenario {
        pods: PODS,
        profile: PROFILE,
        adapters: Vec::new(),
        requests,
        duration_s,
        calibration: CalibrationPlan::NONE,
    }
}
