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
    #[error(
        "the metrics are JSON, not Prometheus text: trtllm-serve up to TensorRT-LLM 1.0 serves its iteration \
         statistics as JSON at /metrics; from 1.1, scrape /prometheus/metrics (the pool's `metrics_path`)"
    )]
    Json,
    #[error("{engine} metrics were expected, but the scrape has no {families} series at all; {hint}")]
    NoSeries { engine: &'static str, families: &'static str, hint: &'static str },
    #[error(
        "no known engine's metrics were found: no vllm:, sglang:, trtllm_, nv_trt_llm_ or llamacpp: series \
         (set the pool's engine to have the missing ones named)"
    )]
    Unrecognized,
}

/// What one scrape of a pod says.
#[derive(Debug, Clone, PartialEq)]
pub struct Scraped {
    pub signals: PodSignals,
    pub counters: Counters,
    /// The series of each load signal the engine did not report (its release does not
    /// export it, or has not set it yet): the signal is unknown, not zero.
    pub unknown: Vec<&'static str>,
}

/// The series an engine reports each load signal in, to name what is missing.
struct LoadSeries {
    waiting: &'static str,
    running: &'static str,
    kv_cache_usage: &'static str,
}

impl Scraped {
    fn new(signals: PodSignals, counters: Counters, series: &LoadSeries) -> Self {
        let unknown = [
            (signals.waiting, series.waiting),
            (signals.running, series.running),
            (signals.kv_cache_usage, series.kv_cache_usage),
        ]
        .into_iter()
        .filter(|(value, _)| value.is_none())
        .map(|(_, name)| name)
        .collect();
        Self { signals, counters, unknown }
    }
}

/// The normalized signals and raw counters of one pod. A signal the engine does not
/// report is unknown; the scrape fails only when the text is not Prometheus text or
/// has no series of the engine at all.
pub fn scrape(engine: Engine, text: &str) -> Result<Scraped, SignalsError> {
    if text.trim_start().starts_with(['[', '{']) {
        return Err(SignalsError::Json);
    }
    // No adapter reads histogram buckets, and they are most of a vLLM scrape's lines.
    let samples = exposition::parse_where(text, |name| !name.ends_with("_bucket"))
        .map_err(|e| SignalsError::Parse(e.to_string()))?;
    let families = || samples.iter().map(|s| s.name).chain(exposition::declared(text));
    let engine = match engine {
        Engine::Auto => detect_families(families()).ok_or(SignalsError::Unrecognized)?,
        known => known,
    };
    let kind = EngineKind::of(engine);
    if !families().any(|name| kind.owns(name, &samples)) {
        return Err(SignalsError::NoSeries { engine: kind.name, families: kind.families, hint: kind.hint });
    }
    Ok(match engine {
        Engine::Vllm | Engine::Auto => vllm::scraped(&samples),
        Engine::Sglang => sglang::scraped(&samples),
        Engine::Trtllm => trtllm::scraped(&samples),
        Engine::Triton => triton::scraped(&samples),
        Engine::LlamaCpp => llama_cpp::scraped(&samples),
    })
}

/// What names an engine's series, and what to say when a scrape has none.
struct EngineKind {
    engine: Engine,
    name: &'static str,
    prefix: &'static str,
    families: &'static str,
    hint: &'static str,
}

const KINDS: [EngineKind; 5] = [
    EngineKind {
        engine: Engine::Vllm,
        name: "vLLM",
        prefix: "vllm:",
        families: "vllm:",
        hint: "vLLM V1 0.7.0 exports none (0.7.1 and later do); is this the pod's metrics port?",
    },
    EngineKind {
        engine: Engine::Sglang,
        name: "SGLang",
        prefix: "sglang:",
        families: "sglang:",
        hint: "SGLang exports them only when started with --enable-metrics (from 0.3.6)",
    },
    EngineKind {
        engine: Engine::Trtllm,
        name: "trtllm-serve",
        prefix: "trtllm_",
        families: "trtllm_ (or TensorRT-LLM 1.1's unprefixed request histograms)",
        hint: "trtllm-serve serves Prometheus text at /prometheus/metrics from TensorRT-LLM 1.1; \
               its load gauges need 1.3 with enable_iter_perf_stats",
    },
    EngineKind {
        engine: Engine::Triton,
        name: "Triton TensorRT-LLM backend",
        prefix: "nv_trt_llm_",
        families: "nv_trt_llm_",
        hint: "the TensorRT-LLM backend exports them from v0.7.0; Triton's own nv_inference_ series carry no \
               load signal",
    },
    EngineKind {
        engine: Engine::LlamaCpp,
        name: "llama.cpp",
        prefix: "llamacpp:",
        families: "llamacpp:",
        hint: "llama-server exports them only when started with --metrics",
    },
];

impl EngineKind {
    fn of(engine: Engine) -> &'static EngineKind {
        let engine = if engine == Engine::Auto { Engine::Vllm } else { engine };
        KINDS.iter().find(|k| k.engine == engine).unwrap_or(&KINDS[0])
    }

    fn owns(&self, family: &str, samples: &[Sample]) -> bool {
        family.starts_with(self.prefix) || (self.engine == Engine::Trtllm && trtllm::unprefixed(family, samples))
    }
}

fn detect_families<'a>(mut families: impl Iterator<Item = &'a str>) -> Option<Engine> {
    families.find_map(|name| KINDS.iter().find(|k| name.starts_with(k.prefix)).map(|k| k.engine))
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
