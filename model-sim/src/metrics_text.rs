//! `/metrics` in vLLM V1's Prometheus exposition, with vLLM's own names and labels.

use std::fmt::Write;

use crate::engine::EngineStats;
use crate::pinned::PinnedMetrics;

pub struct MetricsView<'a> {
    pub model_name: &'a str,
    pub stats: EngineStats,
    pub pinned: Option<&'a PinnedMetrics>,
    pub block_size: u32,
    pub num_gpu_blocks: u64,
    pub max_loras: u32,
    /// Unix seconds, the value vLLM gives `lora_requests_info`.
    pub now_s: f64,
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn gauge(out: &mut String, name: &str, help: &str, labels: &str, value: f64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {value:?}"
    );
}

fn counter(out: &mut String, name: &str, help: &str, labels: &str, value: f64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {value:?}"
    );
}

pub fn vllm_v1(view: &MetricsView<'_>) -> String {
    let pinned = view.pinned.cloned().unwrap_or_default();
    let labels = format!("engine=\"0\",model_name=\"{}\"", escape(view.model_name));
    let mut out = String::with_capacity(2048);
    gauge(
        &mut out,
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        &labels,
        pinned.running.unwrap_or(view.stats.running as f64),
    );
    gauge(
        &mut out,
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        &labels,
        pinned.waiting.unwrap_or(view.stats.waiting as f64),
    );
    gauge(
        &mut out,
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        &labels,
        pinned.kv_cache_usage.unwrap_or(view.stats.kv_cache_usage),
    );
    counter(
        &mut out,
        "vllm:prompt_tokens_total",
        "Number of prefill tokens processed.",
        &labels,
        view.stats.prompt_tokens_total as f64,
    );
    counter(
        &mut out,
        "vllm:generation_tokens_total",
        "Number of generation tokens processed.",
        &labels,
        view.stats.generation_tokens_total as f64,
    );
    gauge(
        &mut out,
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        &format!(
            "block_size=\"{}\",enable_prefix_caching=\"True\",engine=\"0\",num_gpu_blocks=\"{}\"",
            view.block_size, view.num_gpu_blocks
        ),
        1.0,
    );
    let running = pinned.running_lora_adapters.unwrap_or_default().join(",");
    let waiting = pinned.waiting_lora_adapters.unwrap_or_default().join(",");
    gauge(
        &mut out,
        "vllm:lora_requests_info",
        "Running stats on lora requests.",
        &format!(
            "max_lora=\"{}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"",
            view.max_loras,
            escape(&running),
            escape(&waiting)
        ),
        view.now_s,
    );
    out
}
