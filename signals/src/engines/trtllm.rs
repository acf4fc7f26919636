//! trtllm-serve: `trtllm_num_requests_waiting`, `_running`, `trtllm_kv_cache_utilization`.

use infergate_core::snapshot::PodSignals;

use super::{Scraped, SignalsError, mean, sum};
use crate::exposition::Sample;
use crate::learn::Counters;

pub(super) fn scraped(samples: &[Sample]) -> Result<Scraped, SignalsError> {
    let waiting =
        sum(samples, "trtllm_num_requests_waiting").ok_or(SignalsError::Missing("trtllm_num_requests_waiting"))?;
    let running =
        sum(samples, "trtllm_num_requests_running").ok_or(SignalsError::Missing("trtllm_num_requests_running"))?;
    let kv =
        mean(samples, "trtllm_kv_cache_utilization").ok_or(SignalsError::Missing("trtllm_kv_cache_utilization"))?;
    let signals = PodSignals {
        waiting,
        running,
        kv_cache_usage: kv.clamp(0.0, 1.0),
        block_size: mean(samples, "trtllm_kv_cache_tokens_per_block").map(|v| v as u32),
        num_gpu_blocks: mean(samples, "trtllm_kv_cache_max_blocks").map(|v| v as u64),
        ..PodSignals::default()
    };
    Ok(Scraped { signals, counters: Counters::default() })
}
