//! trtllm-serve's Prometheus text (`/prometheus/metrics`, TensorRT-LLM 1.1 and later).
//! 1.1 exports request histograms only, unprefixed; `trtllm_kv_cache_utilization`
//! arrives with the `trtllm_` prefix, and `trtllm_num_requests_{waiting,running}` with
//! the block counts in 1.3, and only with `enable_iter_perf_stats`. Each signal is read
//! where it exists; a scrape of latency histograms alone is a pod whose load is unknown.

use infergate_core::snapshot::PodSignals;

use super::{LoadSeries, Scraped, mean, sum};
use crate::exposition::Sample;
use crate::learn::Counters;

const SERIES: LoadSeries = LoadSeries {
    waiting: "trtllm_num_requests_waiting",
    running: "trtllm_num_requests_running",
    kv_cache_usage: "trtllm_kv_cache_utilization",
};

pub(super) fn scraped(samples: &[Sample]) -> Scraped {
    let max_blocks = mean(samples, "trtllm_kv_cache_max_blocks");
    let used_over_max = mean(samples, "trtllm_kv_cache_used_blocks")
        .zip(max_blocks.filter(|max| *max > 0.0))
        .map(|(used, max)| used / max);
    let signals = PodSignals {
        waiting: sum(samples, SERIES.waiting),
        running: sum(samples, SERIES.running),
        kv_cache_usage: mean(samples, SERIES.kv_cache_usage).or(used_over_max).map(|kv| kv.clamp(0.0, 1.0)),
        block_size: mean(samples, "trtllm_kv_cache_tokens_per_block").map(|v| v as u32),
        num_gpu_blocks: max_blocks.map(|v| v as u64),
        ..PodSignals::default()
    };
    let either = |name: &str| sum(samples, &format!("trtllm_{name}")).or_else(|| sum(samples, name));
    let counters = Counters {
        itl_seconds: either("time_per_output_token_seconds_sum"),
        itl_count: either("time_per_output_token_seconds_count"),
        ..Counters::default()
    };
    Scraped::new(signals, counters, &SERIES)
}

/// TensorRT-LLM 1.1's unprefixed request histograms: named like other engines' but
/// labelled `engine_type`, which no other engine uses.
pub(super) fn unprefixed(family: &str, samples: &[Sample]) -> bool {
    family.starts_with("e2e_request_latency_seconds")
        && samples.iter().any(|s| s.name == family && s.label("engine_type").is_some())
}
