//! trtllm-serve's names.

use super::MetricsView;
use super::writer::{Writer, escape};

pub(super) fn render(view: &MetricsView<'_>) -> String {
    let labels = format!("model_name=\"{}\"", escape(view.model_name));
    let s = &view.stats;
    let mut w = Writer::new();
    w.family("trtllm_num_requests_waiting", "gauge", "Number of requests waiting.")
        .sample("trtllm_num_requests_waiting", &labels, s.waiting as f64)
        .family("trtllm_num_requests_running", "gauge", "Number of requests running.")
        .sample("trtllm_num_requests_running", &labels, s.running as f64)
        .family("trtllm_kv_cache_utilization", "gauge", "KV cache utilization, 0 to 1.")
        .sample("trtllm_kv_cache_utilization", &labels, s.kv_cache_usage)
        .family("trtllm_kv_cache_tokens_per_block", "gauge", "Tokens per KV cache block.")
        .sample("trtllm_kv_cache_tokens_per_block", &labels, f64::from(view.profile.block_size))
        .family("trtllm_kv_cache_max_blocks", "gauge", "KV cache blocks in all.")
        .sample("trtllm_kv_cache_max_blocks", &labels, view.profile.num_gpu_blocks as f64);
    w.finish()
}
