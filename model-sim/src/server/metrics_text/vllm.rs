//! vLLM's names: V1 (per-engine series) and V0.

use super::MetricsView;
use super::writer::{Writer, escape};

fn lora_info(w: &mut Writer, view: &MetricsView<'_>) {
    w.family("vllm:lora_requests_info", "gauge", "Running stats on lora requests.").sample(
        "vllm:lora_requests_info",
        &format!(
            "max_lora=\"{}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"",
            view.profile.max_loras,
            escape(&view.stats.running_adapters.join(",")),
            escape(&view.stats.waiting_adapters.join(","))
        ),
        view.now_s,
    );
}

fn cache_config(w: &mut Writer, view: &MetricsView<'_>, engine_label: bool) {
    let engine = if engine_label { ",engine=\"0\"" } else { "" };
    w.family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig").sample(
        "vllm:cache_config_info",
        &format!(
            "block_size=\"{}\",enable_prefix_caching=\"True\"{engine},num_gpu_blocks=\"{}\"",
            view.profile.block_size, view.profile.num_gpu_blocks
        ),
        1.0,
    );
}

pub(super) fn v1(view: &MetricsView<'_>) -> String {
    let model = escape(view.model_name);
    let ranks: Vec<(u32, String)> =
        (0..view.dp_size.max(1)).map(|r| (r, format!("engine=\"{r}\",model_name=\"{model}\""))).collect();
    let dp = f64::from(view.dp_size.max(1));
    let s = &view.stats;
    let mut w = Writer::new();
    w.family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.");
    for (rank, labels) in &ranks {
        w.sample("vllm:num_requests_running", labels, view.rank_share(s.running, *rank) as f64);
    }
    w.family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
    for (rank, labels) in &ranks {
        w.sample("vllm:num_requests_waiting", labels, view.rank_share(s.waiting, *rank) as f64);
    }
    w.family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
    for (_, labels) in &ranks {
        w.sample("vllm:kv_cache_usage_perc", labels, s.kv_cache_usage);
    }
    let counters = [
        (
            "vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            s.prefix_cache_queries_total,
        ),
        (
            "vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            s.prefix_cache_hits_total,
        ),
        (
            "vllm:external_prefix_cache_hits_total",
            "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
            s.external_prefix_cache_hits_total,
        ),
        ("vllm:prompt_tokens_total", "Number of prefill tokens processed.", s.prompt_tokens_total),
        ("vllm:generation_tokens_total", "Number of generation tokens processed.", s.generation_tokens_total),
    ];
    for (name, help, total) in counters {
        w.family(name, "counter", help);
        for (_, labels) in &ranks {
            w.sample(name, labels, total as f64 / dp);
        }
    }
    let labels = format!("engine=\"0\",model_name=\"{model}\"");
    w.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", &labels, view.ttft);
    w.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", &labels, view.itl);
    w.histogram(
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        &labels,
        view.prefill,
    );
    cache_config(&mut w, view, true);
    lora_info(&mut w, view);
    w.finish()
}

pub(super) fn v0(view: &MetricsView<'_>) -> String {
    let labels = format!("model_name=\"{}\"", escape(view.model_name));
    let s = &view.stats;
    let hit_rate = if s.prefix_cache_queries_total > 0 {
        s.prefix_cache_hits_total as f64 / s.prefix_cache_queries_total as f64
    } else {
        -1.0
    };
    let mut w = Writer::new();
    w.family("vllm:num_requests_running", "gauge", "Number of requests currently running on GPU.")
        .sample("vllm:num_requests_running", &labels, s.running as f64)
        .family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.")
        .sample("vllm:num_requests_waiting", &labels, s.waiting as f64)
        .family("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.")
        .sample("vllm:gpu_cache_usage_perc", &labels, s.kv_cache_usage)
        .family("vllm:gpu_prefix_cache_hit_rate", "gauge", "GPU prefix cache block hit rate.")
        .sample("vllm:gpu_prefix_cache_hit_rate", &labels, hit_rate)
        .histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            &labels,
            view.ttft,
        )
        .histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            &labels,
            view.itl,
        );
    cache_config(&mut w, view, false);
    lora_info(&mut w, view);
    w.finish()
}
