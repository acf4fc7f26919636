//! Triton with the TensorRT-LLM backend: one family per kind, told apart by label —
//! `nv_trt_llm_request_metrics{request_type="waiting"|"scheduled"}` and
//! `nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"|"tokens_per"|"max"}`.

use infergate_core::snapshot::PodSignals;

use super::{Scraped, SignalsError};
use crate::exposition::Sample;
use crate::learn::Counters;

const REQUESTS: &str = "nv_trt_llm_request_metrics";
const BLOCKS: &str = "nv_trt_llm_kv_cache_block_metrics";

fn labelled(samples: &[Sample], family: &str, label: &str, value: &str) -> Option<f64> {
    let values: Vec<f64> = samples
        .iter()
        .filter(|s| s.name == family && s.label(label) == Some(value))
        .map(|s| s.value)
        .filter(|v| v.is_finite())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

pub(super) fn scraped(samples: &[Sample]) -> Result<Scraped, SignalsError> {
    let waiting = labelled(samples, REQUESTS, "request_type", "waiting").ok_or(SignalsError::Missing(REQUESTS))?;
    let running = labelled(samples, REQUESTS, "request_type", "scheduled").unwrap_or(0.0);
    let kv = labelled(samples, BLOCKS, "kv_cache_block_type", "fraction").ok_or(SignalsError::Missing(BLOCKS))?;
    let signals = PodSignals {
        waiting,
        running,
        kv_cache_usage: kv.clamp(0.0, 1.0),
        block_size: labelled(samples, BLOCKS, "kv_cache_block_type", "tokens_per").map(|v| v as u32),
        num_gpu_blocks: labelled(samples, BLOCKS, "kv_cache_block_type", "max").map(|v| v as u64),
        ..PodSignals::default()
    };
    Ok(Scraped { signals, counters: Counters::default() })
}
