//! Engine adapters: each maps one engine's Prometheus names to the snapshot's signals.

mod llama_cpp;
mod sglang;
mod triton;
mod trtllm;
mod vllm;

use infergate_core::config::Engine;

use crate::exposition::{self, Sample};
use crate::learn::Counters;
use infergate_core::snapshot::PodSignals;

#[derive(Debug, thiserror::Error)]
pub enum SignalsError {
    #[error("the metrics text does not parse: {0}")]
    Parse(String),
    #[error("the metrics have no {0} series; is this the right engine?")]
    Missing(&'static str),
    #[error("no known engine's metrics (vLLM, SGLang, trtllm-serve, Triton, llama.cpp) were found")]
    Unrecognized,
}

/// What one scrape of a pod says.
#[derive(Debug, Clone, PartialEq)]
pub struct Scraped {
    pub signals: PodSignals,
    pub counters: Counters,
}

/// The normalized signals and raw counters of one pod.
pub fn scrape(engine: Engine, text: &str) -> Result<Scraped, SignalsError> {
    // No adapter reads histogram buckets, and they are most of a vLLM scrape's lines.
    let samples = exposition::parse_where(text, |name| !name.ends_with("_bucket"))
        .map_err(|e| SignalsError::Parse(e.to_string()))?;
    let engine = match engine {
        Engine::Auto => detect(&samples).ok_or(SignalsError::Unrecognized)?,
        known => known,
    };
    match engine {
        Engine::Vllm | Engine::Auto => vllm::scraped(&samples),
        Engine::Sglang => sglang::scraped(&samples),
        Engine::Trtllm => trtllm::scraped(&samples),
        Engine::Triton => triton::scraped(&samples),
        Engine::LlamaCpp => llama_cpp::scraped(&samples),
    }
}

/// Which engine wrote these metrics, from a family only it exposes.
pub fn detect(samples: &[Sample]) -> Option<Engine> {
    const MARKERS: [(&str, Engine); 5] = [
        ("vllm:num_requests_waiting", Engine::Vllm),
        ("sglang:num_queue_reqs", Engine::Sglang),
        ("trtllm_num_requests_waiting", Engine::Trtllm),
        ("nv_trt_llm_request_metrics", Engine::Triton),
        ("llamacpp:requests_processing", Engine::LlamaCpp),
    ];
    MARKERS.iter().find(|(name, _)| samples.iter().any(|s| s.name == *name)).map(|(_, engine)| *engine)
}

/// The normalized signals of one pod.
pub fn signals(engine: Engine, text: &str) -> Result<PodSignals, SignalsError> {
    scrape(engine, text).map(|s| s.signals)
}

/// Every signal read is a count, a usage fraction or a counter: a negative value (vLLM
/// writes -1 for "unknown") is not a reading, and would make the snapshot refused.
fn usable_values<'a>(samples: &'a [Sample], name: &'a str) -> impl Iterator<Item = f64> + 'a {
    samples.iter().filter(move |s| s.name == name).map(|s| s.value).filter(|v| v.is_finite() && *v >= 0.0)
}

/// Sum of a family over its series (e.g. data-parallel `engine="N"` ranks).
fn sum(samples: &[Sample], name: &str) -> Option<f64> {
    let mut values = usable_values(samples, name).peekable();
    values.peek()?;
    Some(values.sum())
}

/// Mean of a family over its series: usage is per rank, so ranks average.
fn mean(samples: &[Sample], name: &str) -> Option<f64> {
    let (total, count) = usable_values(samples, name).fold((0.0, 0usize), |(t, c), v| (t + v, c + 1));
    (count > 0).then(|| total / count as f64)
}

#[cfg(test)]
mod tests;
