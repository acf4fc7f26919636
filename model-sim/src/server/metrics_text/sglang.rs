//! SGLang's names, with its label set.

use super::MetricsView;
use super::writer::{Writer, escape};

pub(super) fn render(view: &MetricsView<'_>) -> String {
    let labels =
        format!("engine_type=\"unified\",model_name=\"{}\",pp_rank=\"0\",tp_rank=\"0\"", escape(view.model_name));
    let s = &view.stats;
    let hit_rate = if s.prefix_cache_queries_total > 0 {
        s.prefix_cache_hits_total as f64 / s.prefix_cache_queries_total as f64
    } else {
        0.0
    };
    let mut w = Writer::new();
    w.family("sglang:num_running_reqs", "gauge", "The number of running requests.")
        .sample("sglang:num_running_reqs", &labels, s.running as f64)
        .family("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.")
        .sample("sglang:num_queue_reqs", &labels, s.waiting as f64)
        .family("sglang:token_usage", "gauge", "The token usage.")
        .sample("sglang:token_usage", &labels, s.kv_cache_usage)
        .family("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.")
        .sample("sglang:cache_hit_rate", &labels, hit_rate)
        .family("sglang:max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool.")
        .sample("sglang:max_total_num_tokens", &labels, view.profile.kv_capacity_tokens() as f64)
        .family("sglang:cache_config_info", "gauge", "Information of the KV cache configuration.")
        .sample(
            "sglang:cache_config_info",
            &format!("num_pages=\"{}\",page_size=\"{}\"", view.profile.num_gpu_blocks, view.profile.block_size),
            1.0,
        )
        .family("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.")
        .sample("sglang:prompt_tokens_total", &labels, s.prompt_tokens_total as f64)
        .family("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.")
        .sample("sglang:cached_tokens_total", &labels, s.prefix_cache_hits_total as f64)
        .family("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.")
        .sample("sglang:generation_tokens_total", &labels, s.generation_tokens_total as f64);
    let model = format!("model_name=\"{}\"", escape(view.model_name));
    w.histogram(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        &model,
        view.ttft,
    )
    .histogram(
        "sglang:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        &model,
        view.itl,
    );
    w.finish()
}
