//! vLLM (V1, and V0's names where they differ). V1 has exported the three load gauges
//! since 0.7.1 (KV use as `gpu_cache_usage_perc` until 0.9.2 renamed it, hidden from
//! 0.11.0); adapters only when LoRA is enabled (0.8.0 and later), so without
//! `lora_requests_info` they are unknown rather than "none loaded". The prefix-cache
//! counters are `gpu_prefix_cache_*` from 0.7.3, counted in blocks until 0.9.1, and
//! `prefix_cache_*`, in tokens, from 0.9.2.

use infergate_core::snapshot::PodSignals;

use super::{LoadSeries, Scraped, mean, sum};
use crate::exposition::Sample;
use crate::learn::Counters;

const SERIES: LoadSeries = LoadSeries {
    waiting: "vllm:num_requests_waiting",
    running: "vllm:num_requests_running",
    kv_cache_usage: "vllm:kv_cache_usage_perc",
};

pub(super) fn scraped(samples: &[Sample]) -> Scraped {
    Scraped::new(signals(samples), counters(samples), &SERIES)
}

fn counters(samples: &[Sample]) -> Counters {
    Counters {
        prompt_tokens: sum(samples, "vllm:prompt_tokens_total"),
        cached_tokens: sum(samples, "vllm:prefix_cache_hits_total"),
        // 0.7.3 to 0.9.1 (and beside the new names until 0.11.0): in blocks before
        // 0.9.1, in tokens from it, which the text does not tell apart.
        prefix_hits: sum(samples, "vllm:gpu_prefix_cache_hits_total"),
        prefix_queries: sum(samples, "vllm:gpu_prefix_cache_queries_total"),
        // A P/D decode pod's transferred prompt tokens (KV connector).
        external_tokens: sum(samples, "vllm:external_prefix_cache_hits_total"),
        prefill_seconds: sum(samples, "vllm:request_prefill_time_seconds_sum"),
        prefilled_requests: sum(samples, "vllm:request_prefill_time_seconds_count"),
        itl_seconds: sum(samples, "vllm:inter_token_latency_seconds_sum")
            .or_else(|| sum(samples, "vllm:time_per_output_token_seconds_sum")),
        itl_count: sum(samples, "vllm:inter_token_latency_seconds_count")
            .or_else(|| sum(samples, "vllm:time_per_output_token_seconds_count")),
        inference_seconds: sum(samples, "vllm:request_inference_time_seconds_sum"),
        inference_requests: sum(samples, "vllm:request_inference_time_seconds_count"),
    }
}

fn signals(scrape: &[Sample]) -> PodSignals {
    let mut signals = PodSignals {
        waiting: sum(scrape, SERIES.waiting),
        running: sum(scrape, SERIES.running),
        kv_cache_usage: mean(scrape, SERIES.kv_cache_usage)
            .or_else(|| mean(scrape, "vllm:gpu_cache_usage_perc"))
            .map(|kv| kv.clamp(0.0, 1.0)),
        ..PodSignals::default()
    };
    if let Some(config) = scrape.iter().find(|s| s.name == "vllm:cache_config_info") {
        signals.block_size = config.label("block_size").and_then(|v| v.parse().ok());
        signals.num_gpu_blocks = config.label("num_gpu_blocks").and_then(|v| v.parse().ok());
    }
    // Its value is a timestamp: the newest series is the current state.
    let lora = scrape.iter().filter(|s| s.name == "vllm:lora_requests_info").max_by(|a, b| a.value.total_cmp(&b.value));
    if let Some(lora) = lora {
        let list = |key: &str| -> Vec<String> {
            lora.label(key)
                .map(|v| v.split(',').map(str::trim).filter(|a| !a.is_empty()).map(String::from).collect())
                .unwrap_or_default()
        };
        signals.running_adapters = list("running_lora_adapters");
        signals.waiting_adapters = list("waiting_lora_adapters");
        signals.max_loras = lora.label("max_lora").and_then(|v| v.parse().ok());
    }
    signals
}

#[cfg(test)]
mod tests {
    use infergate_core::config::Engine;

    use crate::engines::signals;

    const V1: &str = include_str!("../../tests/data/vllm-v1_qwen3-0.6b.txt");
    const V0: &str = include_str!("../../tests/data/vllm-v0_qwen2.5-coder-1.5b.txt");

    #[test]
    fn real_vllm_v1_sample_counters() {
        let scraped = crate::engines::scrape(Engine::Vllm, V1).unwrap();
        assert_eq!(scraped.counters.prompt_tokens, Some(66.0));
        assert_eq!(scraped.counters.prefilled_requests, Some(2.0));
        assert_eq!(scraped.counters.itl_count, Some(598.0));
        assert_eq!(scraped.counters.inference_requests, Some(2.0));
        assert!(scraped.counters.inference_seconds.is_some_and(|s| (s - 3.5717).abs() < 1e-4));
    }

    #[test]
    fn real_vllm_v1_sample() {
        let s = signals(Engine::Vllm, V1).unwrap();
        assert_eq!((s.waiting, s.running, s.kv_cache_usage), (Some(0.0), Some(0.0), Some(0.0)));
        assert_eq!((s.block_size, s.num_gpu_blocks), (Some(16), Some(5943)));
        assert!(s.running_adapters.is_empty());
    }

    #[test]
    fn real_vllm_v0_sample_uses_gpu_cache_usage() {
        let s = signals(Engine::Vllm, V0).unwrap();
        assert_eq!((s.block_size, s.num_gpu_blocks, s.max_loras), (Some(16), Some(81767), Some(0)));
    }

    #[test]
    fn vllm_0_8_prefix_counters_are_read_under_their_old_names() {
        // The families vLLM 0.8.x registers (vllm/v1/metrics/loggers.py @ v0.8.0).
        let text = "vllm:num_requests_running{model_name=\"m\",engine=\"0\"} 1.0\n\
                    vllm:num_requests_waiting{model_name=\"m\",engine=\"0\"} 0.0\n\
                    vllm:gpu_cache_usage_perc{model_name=\"m\",engine=\"0\"} 0.3\n\
                    vllm:gpu_prefix_cache_queries_total{model_name=\"m\",engine=\"0\"} 1250.0\n\
                    vllm:gpu_prefix_cache_hits_total{model_name=\"m\",engine=\"0\"} 500.0\n\
                    vllm:prompt_tokens_total{model_name=\"m\",engine=\"0\"} 20000.0\n";
        let scraped = crate::engines::scrape(Engine::Vllm, text).unwrap();
        assert_eq!(scraped.counters.cached_tokens, None);
        assert_eq!((scraped.counters.prefix_hits, scraped.counters.prefix_queries), (Some(500.0), Some(1250.0)));
        let v1 = crate::engines::scrape(Engine::Vllm, V1).unwrap();
        assert!(v1.counters.cached_tokens.is_some(), "today's name, in tokens, is read as it is");
    }

    #[test]
    fn data_parallel_ranks_sum_counts_and_average_usage() {
        let text = "vllm:num_requests_waiting{engine=\"0\"} 2\nvllm:num_requests_waiting{engine=\"1\"} 3\n\
                    vllm:num_requests_running{engine=\"0\"} 4\nvllm:num_requests_running{engine=\"1\"} 1\n\
                    vllm:kv_cache_usage_perc{engine=\"0\"} 0.2\nvllm:kv_cache_usage_perc{engine=\"1\"} 0.6\n";
        let s = signals(Engine::Vllm, text).unwrap();
        assert_eq!((s.waiting, s.running), (Some(5.0), Some(5.0)));
        assert!((s.kv_cache_usage.unwrap() - 0.4).abs() < 1e-9);
    }

    #[test]
    fn newest_lora_series_wins() {
        let text = "vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:kv_cache_usage_perc 0\n\
                    vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"old\",waiting_lora_adapters=\"\"} 100\n\
                    vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"a,b\",waiting_lora_adapters=\"c\"} 200\n";
        let s = signals(Engine::Vllm, text).unwrap();
        assert_eq!(s.running_adapters, ["a", "b"]);
        assert_eq!(s.waiting_adapters, ["c"]);
        assert_eq!(s.max_loras, Some(4));
    }

    #[test]
    fn a_scrape_without_any_vllm_series_is_refused_with_the_reason() {
        let err = signals(Engine::Vllm, "python_gc_objects_collected_total{generation=\"0\"} 1\n").unwrap_err();
        assert!(err.to_string().contains("no vllm: series at all; vLLM V1 0.7.0 exports none"), "{err}");
    }
}
