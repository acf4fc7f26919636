//! `/metrics` in each engine's own Prometheus dialect, with the names and labels the
//! real servers use, so that the agent's adapters are exercised as in production.

pub mod pd;
mod sglang;
mod trtllm;
mod vllm;
mod writer;

use crate::engine::{EngineProfile, EngineStats, Histogram};
use crate::server::pinned::PinnedMetrics;

/// Which server's metric names to expose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MetricsFormat {
    /// vLLM V1 (`vllm:kv_cache_usage_perc`, `engine` label).
    #[default]
    Vllm,
    /// vLLM V0 (`vllm:gpu_cache_usage_perc`, lifetime prefix hit rate).
    VllmV0,
    /// SGLang (`sglang:num_queue_reqs`, `sglang:token_usage`).
    Sglang,
    /// trtllm-serve (`trtllm_num_requests_waiting`, `trtllm_kv_cache_utilization`).
    Trtllm,
}

/// Everything a format needs, with pinned values already applied.
pub struct MetricsView<'a> {
    pub model_name: &'a str,
    pub stats: EngineStats,
    pub ttft: &'a Histogram,
    pub itl: &'a Histogram,
    pub prefill: &'a Histogram,
    pub profile: &'a EngineProfile,
    /// Data-parallel ranks: counts are split across `engine="N"` series, usage repeats.
    pub dp_size: u32,
    /// Unix seconds, the value vLLM gives `lora_requests_info`.
    pub now_s: f64,
}

impl MetricsView<'_> {
    /// Applies pinned values over what the engine measured.
    pub fn pin(&mut self, pinned: &PinnedMetrics) {
        if let Some(v) = pinned.waiting {
            self.stats.waiting = v.max(0.0) as usize;
        }
        if let Some(v) = pinned.running {
            self.stats.running = v.max(0.0) as usize;
        }
        if let Some(v) = pinned.kv_cache_usage {
            self.stats.kv_cache_usage = v;
        }
        if let Some(v) = &pinned.running_lora_adapters {
            self.stats.running_adapters = v.clone();
        }
        if let Some(v) = &pinned.waiting_lora_adapters {
            self.stats.waiting_adapters = v.clone();
        }
    }

    /// The share of a count that rank `rank` reports.
    fn rank_share(&self, total: usize, rank: u32) -> usize {
        let dp = self.dp_size.max(1) as usize;
        total / dp + usize::from((rank as usize) < total % dp)
    }
}

pub fn render(format: MetricsFormat, view: &MetricsView<'_>) -> String {
    match format {
        MetricsFormat::Vllm => vllm::v1(view),
        MetricsFormat::VllmV0 => vllm::v0(view),
        MetricsFormat::Sglang => sglang::render(view),
        MetricsFormat::Trtllm => trtllm::render(view),
    }
}

#[cfg(test)]
mod tests;
