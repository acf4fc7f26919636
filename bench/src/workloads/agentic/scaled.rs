//! The agentic sessions scaled down for a small real engine (SmolLM2 on CPU): every
//! prompt keeps the first `1/divisor` of its blocks, so that a call that extended the
//! one before it still extends it, and the sessions' shared tool preamble stays shared;
//! outputs are cut alike. The arrivals (think times, the closed loop) are the
//! workload's own, in real seconds.

use infergate_model_sim::engine::EngineProfile;

use crate::request::{BenchRequest, Prompt};
use crate::workloads::Scenario;

/// How a scenario is scaled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scaling {
    /// Prompt tokens (and blocks) are divided by this.
    pub divisor: usize,
    /// Output tokens are divided by `divisor / 10` and capped here: a CPU engine
    /// decodes at 40-90 ms a token.
    pub max_output_tokens: u32,
    pub pods: usize,
}

/// `scenario` scaled, served as `model` on `pods` pods of `profile`.
pub fn scaled(scenario: &Scenario, scaling: Scaling, model: &str, profile: EngineProfile) -> Scenario {
    let divisor = scaling.divisor.max(1);
    let output_divisor = (divisor / 10).max(1) as u32;
    let requests = scenario
        .requests
        .iter()
        .map(|request| {
            let prompt = match &request.prompt {
                Prompt::Blocks(blocks) => {
                    let mut blocks = blocks.clone();
                    blocks.keys.truncate(blocks.keys.len().div_ceil(divisor));
                    blocks.len = (blocks.len / divisor).max(blocks.header.len() + 1);
                    Prompt::Blocks(blocks)
                }
                Prompt::Text(bytes) => {
                    Prompt::Text(bytes.get(..(bytes.len() / divisor).max(1)).unwrap_or_default().to_vec())
                }
            };
            BenchRequest {
                model: model.to_string(),
                prompt,
                output_tokens: (request.output_tokens / output_divisor).clamp(1, scaling.max_output_tokens),
                ..request.clone()
            }
        })
        .collect();
    Scenario {
        pods: scaling.pods,
        profile,
        adapters: scenario.adapters.clone(),
        requests,
        duration_s: scenario.duration_s,
        calibration: scenario.calibration.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::{Agentic, LoadStep, Workload};

    #[test]
    fn scaled_calls_still_extend_the_calls_before_them() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces/agentic");
        let agentic = Agentic::load(&dir, vec![2.0], 120.0, 10.0).expect("the recorded sessions load");
        let scenario = agentic.scenario(LoadStep { qps: 2.0 }, 1);
        let scaling = Scaling { divisor: 100, max_output_tokens: 32, pods: 3 };
        let small = scaled(&scenario, scaling, "smollm2", EngineProfile::TINY);
        assert_eq!(small.requests.len(), scenario.requests.len());
        assert_eq!(small.pods, 3);
        let mut extended = 0;
        for (request, original) in small.requests.iter().zip(&scenario.requests) {
            assert_eq!(request.model, "smollm2");
            assert!(request.output_tokens <= 32);
            assert!(
                request.prompt.len() * 90 <= original.prompt.len().max(90),
                "{} of {}",
                request.prompt.len(),
                original.prompt.len()
            );
            if let crate::request::Arrival::After { previous, .. } = request.arrival {
                let (before, now) = (small.requests[previous].prompt.bytes(), request.prompt.bytes());
                let blocks = |r: &BenchRequest| match &r.prompt {
                    Prompt::Blocks(b) => b.keys.len(),
                    Prompt::Text(_) => 0,
                };
                let shared = blocks(&small.requests[previous]).min(blocks(request)) * 256;
                let shared = shared.min(before.len()).min(now.len());
                if shared > 0 && before[..shared] == now[..shared] {
                    extended += 1;
                }
            }
        }
        let follow_ups =
            small.requests.iter().filter(|r| matches!(r.arrival, crate::request::Arrival::After { .. })).count();
        assert!(extended * 10 >= follow_ups * 8, "{extended} of {follow_ups} follow-ups extend the call before");
    }
}
