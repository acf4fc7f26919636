//! llama.cpp server (`--metrics`): `llamacpp:requests_deferred` waits,
//! `llamacpp:requests_processing` runs. `llamacpp:kv_cache_usage_ratio` existed from
//! February 2024 until llama.cpp removed it in May 2025 (PR #13660): in later builds KV
//! use is unknown.

use infergate_core::snapshot::PodSignals;

use super::{LoadSeries, Scraped, mean, sum};
use crate::exposition::Sample;
use crate::learn::Counters;

const SERIES: LoadSeries = LoadSeries {
    waiting: "llamacpp:requests_deferred",
    running: "llamacpp:requests_processing",
    kv_cache_usage: "llamacpp:kv_cache_usage_ratio",
};

pub(super) fn scraped(samples: &[Sample]) -> Scraped {
    let signals = PodSignals {
        waiting: sum(samples, SERIES.waiting),
        running: sum(samples, SERIES.running),
        kv_cache_usage: mean(samples, SERIES.kv_cache_usage).map(|kv| kv.clamp(0.0, 1.0)),
        ..PodSignals::default()
    };
    let counters = Counters {
        prompt_tokens: sum(samples, "llamacpp:prompt_tokens_total"),
        prefill_seconds: sum(samples, "llamacpp:prompt_seconds_total"),
        ..Counters::default()
    };
    Scraped::new(signals, counters, &SERIES)
}
