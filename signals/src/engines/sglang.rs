//! SGLang: `num_queue_reqs`, `num_running_reqs`, `token_usage` (all since 0.3.6, the
//! first release with metrics). The KV size: `page_size` and `num_pages` gauges (0.5.11
//! and later), else `cache_config_info{page_size,num_pages}` (0.5.9–0.5.10), else
//! `max_total_num_tokens` (0.5.6 and later) in pages of one token. Gauges have no sample
//! until the scheduler first logs its stats, so a fresh pod's are unknown.

use infergate_core::snapshot::PodSignals;

use super::{LoadSeries, Scraped, mean};
use crate::exposition::Sample;
use crate::learn::Counters;

const SERIES: LoadSeries = LoadSeries {
    waiting: "sglang:num_queue_reqs",
    running: "sglang:num_running_reqs",
    kv_cache_usage: "sglang:token_usage",
};

pub(super) fn scraped(samples: &[Sample]) -> Scraped {
    let mut signals = PodSignals {
        waiting: total(samples, SERIES.waiting),
        running: total(samples, SERIES.running),
        kv_cache_usage: mean(samples, SERIES.kv_cache_usage).map(|kv| kv.clamp(0.0, 1.0)),
        ..PodSignals::default()
    };
    let config = samples.iter().find(|s| s.name == "sglang:cache_config_info");
    if let (Some(size), Some(pages)) = (mean(samples, "sglang:page_size"), mean(samples, "sglang:num_pages")) {
        signals.block_size = Some(size as u32);
        signals.num_gpu_blocks = Some(pages as u64);
    } else if let Some(config) = config {
        signals.block_size = config.label("page_size").and_then(|v| v.parse().ok());
        signals.num_gpu_blocks = config.label("num_pages").and_then(|v| v.parse().ok());
    } else if let Some(tokens) = mean(samples, "sglang:max_total_num_tokens") {
        signals.block_size = Some(1);
        signals.num_gpu_blocks = Some(tokens as u64);
    }
    let counters = Counters {
        prompt_tokens: total(samples, "sglang:prompt_tokens_total"),
        cached_tokens: total(samples, "sglang:cached_tokens_total"),
        // Inter-token latency from 0.4.4; before, time per output token measures the same.
        itl_seconds: total(samples, "sglang:inter_token_latency_seconds_sum")
            .or_else(|| total(samples, "sglang:time_per_output_token_seconds_sum")),
        itl_count: total(samples, "sglang:inter_token_latency_seconds_count")
            .or_else(|| total(samples, "sglang:time_per_output_token_seconds_count")),
        ..Counters::default()
    };
    Scraped::new(signals, counters, &SERIES)
}

/// Sum of a family over its ranks. With priority scheduling (0.5.10 and later) the queue
/// counts come as a total under `priority=""` plus one series per priority: only the
/// totals are summed, or every request would count twice.
fn total(samples: &[Sample], name: &str) -> Option<f64> {
    let by_priority = samples.iter().any(|s| s.name == name && s.label("priority").is_some_and(|p| !p.is_empty()));
    let values: Vec<f64> = samples
        .iter()
        .filter(|s| s.name == name && !(by_priority && s.label("priority").is_some_and(|p| !p.is_empty())))
        .map(|s| s.value)
        .filter(|v| v.is_finite() && *v >= 0.0)
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}
