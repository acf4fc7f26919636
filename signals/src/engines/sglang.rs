//! SGLang: `num_queue_reqs`, `num_running_reqs`, `token_usage`; the KV size from
//! `cache_config_info{page_size,num_pages}` or, in builds without it, from
//! `max_total_num_tokens` in pages of one token.

use infergate_core::snapshot::PodSignals;

use super::{Scraped, SignalsError, mean, sum};
use crate::exposition::Sample;
use crate::learn::Counters;

pub(super) fn scraped(samples: &[Sample]) -> Result<Scraped, SignalsError> {
    let waiting = sum(samples, "sglang:num_queue_reqs").ok_or(SignalsError::Missing("sglang:num_queue_reqs"))?;
    let running = sum(samples, "sglang:num_running_reqs").ok_or(SignalsError::Missing("sglang:num_running_reqs"))?;
    let kv = mean(samples, "sglang:token_usage").ok_or(SignalsError::Missing("sglang:token_usage"))?;
    let mut signals = PodSignals { waiting, running, kv_cache_usage: kv.clamp(0.0, 1.0), ..PodSignals::default() };
    if let Some(config) = samples.iter().find(|s| s.name == "sglang:cache_config_info") {
        signals.block_size = config.label("page_size").and_then(|v| v.parse().ok());
        signals.num_gpu_blocks = config.label("num_pages").and_then(|v| v.parse().ok());
    } else if let Some(tokens) = mean(samples, "sglang:max_total_num_tokens") {
        signals.block_size = Some(1);
        signals.num_gpu_blocks = Some(tokens as u64);
    }
    let counters = Counters {
        prompt_tokens: sum(samples, "sglang:prompt_tokens_total"),
        cached_tokens: sum(samples, "sglang:cached_tokens_total"),
        itl_seconds: sum(samples, "sglang:inter_token_latency_seconds_sum"),
        itl_count: sum(samples, "sglang:inter_token_latency_seconds_count"),
        ..Counters::default()
    };
    Ok(Scraped { signals, counters })
}
