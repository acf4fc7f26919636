//! llama.cpp server (`--metrics`): `llamacpp:requests_deferred` waits,
//! `llamacpp:requests_processing` runs, `llamacpp:kv_cache_usage_ratio` is KV use.

use infergate_core::snapshot::PodSignals;

use super::{Scraped, SignalsError, mean, sum};
use crate::exposition::Sample;
use crate::learn::Counters;

pub(super) fn scraped(samples: &[Sample]) -> Result<Scraped, SignalsError> {
    let running =
        sum(samples, "llamacpp:requests_processing").ok_or(SignalsError::Missing("llamacpp:requests_processing"))?;
    let signals = PodSignals {
        waiting: sum(samples, "llamacpp:requests_deferred").unwrap_or(0.0),
        running,
        kv_cache_usage: mean(samples, "llamacpp:kv_cache_usage_ratio").unwrap_or(0.0).clamp(0.0, 1.0),
        ..PodSignals::default()
    };
    let counters = Counters {
        prompt_tokens: sum(samples, "llamacpp:prompt_tokens_total"),
        prefill_seconds: sum(samples, "llamacpp:prompt_seconds_total"),
        ..Counters::default()
    };
    Ok(Scraped { signals, counters })
}
