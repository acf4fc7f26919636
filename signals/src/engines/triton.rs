//! Triton with the TensorRT-LLM backend: one family per kind, told apart by label —
//! `nv_trt_llm_request_metrics{request_type=...}` and
//! `nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=...}`. The backend added
//! `request_type="waiting"` and `kv_cache_block_type="fraction"` in v0.18.0, derived
//! from what v0.7.0 to v0.17.0 already export: waiting = active − scheduled and
//! fraction = used / max. Older exporters are read the same way.

use infergate_core::snapshot::PodSignals;

use super::{LoadSeries, Scraped};
use crate::exposition::Sample;
use crate::learn::Counters;

const REQUESTS: &str = "nv_trt_llm_request_metrics";
const BLOCKS: &str = "nv_trt_llm_kv_cache_block_metrics";
const SERIES: LoadSeries = LoadSeries {
    waiting: "nv_trt_llm_request_metrics{request_type=\"waiting\"} (or \"active\" and \"scheduled\")",
    running: "nv_trt_llm_request_metrics{request_type=\"scheduled\"}",
    kv_cache_usage: "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"fraction\"} (or \"used\" and \"max\")",
};

fn labelled(samples: &[Sample], family: &str, label: &str, value: &str) -> Option<f64> {
    let values: Vec<f64> = samples
        .iter()
        .filter(|s| s.name == family && s.label(label) == Some(value))
        .map(|s| s.value)
        .filter(|v| v.is_finite() && *v >= 0.0)
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

pub(super) fn scraped(samples: &[Sample]) -> Scraped {
    let request = |kind| labelled(samples, REQUESTS, "request_type", kind);
    let blocks = |kind| labelled(samples, BLOCKS, "kv_cache_block_type", kind);
    let scheduled = request("scheduled");
    let waiting = request("waiting")
        .or_else(|| request("active").zip(scheduled).map(|(active, scheduled)| (active - scheduled).max(0.0)));
    // A backend without KV statistics leaves every block count at 0: no capacity
    // reported is unknown use, not an empty cache.
    let max = blocks("max").filter(|max| *max > 0.0);
    let kv = blocks("fraction").or_else(|| blocks("used").zip(max).map(|(used, max)| used / max));
    let signals = PodSignals {
        waiting,
        running: scheduled,
        kv_cache_usage: kv.map(|kv| kv.clamp(0.0, 1.0)),
        block_size: blocks("tokens_per").map(|v| v as u32),
        num_gpu_blocks: max.map(|v| v as u64),
        ..PodSignals::default()
    };
    Scraped::new(signals, Counters::default(), &SERIES)
}
