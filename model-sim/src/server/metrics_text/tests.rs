use infergate_signals::exposition::parse;

use super::*;
use crate::engine::{Engine, EngineProfile};

fn view_text(format: MetricsFormat, dp_size: u32) -> String {
    let engine = Engine::new(EngineProfile::TINY);
    let mut stats = engine.stats(0.0);
    stats.waiting = 5;
    stats.running = 3;
    stats.kv_cache_usage = 0.25;
    stats.running_adapters = vec!["sql-lora".into()];
    let view = MetricsView {
        model_name: "m\"odel",
        stats,
        ttft: &engine.ttft,
        itl: &engine.itl,
        prefill: &engine.prefill,
        profile: engine.profile(),
        dp_size,
        now_s: 1_700_000_000.0,
    };
    render(format, &view)
}

fn names(text: &str) -> Vec<String> {
    parse(text).unwrap().into_iter().map(|s| s.name.to_string()).collect()
}

#[test]
fn every_format_parses_and_has_the_routing_signals() {
    let expected: [(MetricsFormat, &[&str]); 4] = [
        (
            MetricsFormat::Vllm,
            &[
                "vllm:num_requests_waiting",
                "vllm:num_requests_running",
                "vllm:kv_cache_usage_perc",
                "vllm:cache_config_info",
                "vllm:lora_requests_info",
                "vllm:prefix_cache_hits_total",
                "vllm:prefix_cache_queries_total",
                "vllm:time_to_first_token_seconds_bucket",
                "vllm:inter_token_latency_seconds_bucket",
                "vllm:request_prefill_time_seconds_sum",
            ],
        ),
        (
            MetricsFormat::VllmV0,
            &[
                "vllm:num_requests_waiting",
                "vllm:num_requests_running",
                "vllm:gpu_cache_usage_perc",
                "vllm:gpu_prefix_cache_hit_rate",
                "vllm:cache_config_info",
                "vllm:lora_requests_info",
            ],
        ),
        (
            MetricsFormat::Sglang,
            &[
                "sglang:num_queue_reqs",
                "sglang:num_running_reqs",
                "sglang:token_usage",
                "sglang:cache_hit_rate",
                "sglang:cache_config_info",
            ],
        ),
        (
            MetricsFormat::Trtllm,
            &[
                "trtllm_num_requests_waiting",
                "trtllm_num_requests_running",
                "trtllm_kv_cache_utilization",
                "trtllm_kv_cache_tokens_per_block",
            ],
        ),
    ];
    for (format, wanted) in expected {
        let present = names(&view_text(format, 1));
        for name in wanted {
            assert!(present.iter().any(|n| n == name), "{format:?} lacks {name}");
        }
    }
}

#[test]
fn data_parallel_ranks_split_counts_and_repeat_usage() {
    let text = view_text(MetricsFormat::Vllm, 2);
    let samples = parse(&text).unwrap();
    let of = |name: &str| -> Vec<f64> { samples.iter().filter(|s| s.name == name).map(|s| s.value).collect() };
    assert_eq!(of("vllm:num_requests_waiting"), [3.0, 2.0]);
    assert_eq!(of("vllm:num_requests_running"), [2.0, 1.0]);
    assert_eq!(of("vllm:kv_cache_usage_perc"), [0.25, 0.25]);
    let ranks: Vec<&str> =
        samples.iter().filter(|s| s.name == "vllm:num_requests_waiting").filter_map(|s| s.label("engine")).collect();
    assert_eq!(ranks, ["0", "1"]);
}

#[test]
fn label_values_are_escaped() {
    let text = view_text(MetricsFormat::Vllm, 1);
    let samples = parse(&text).unwrap();
    let waiting = samples.iter().find(|s| s.name == "vllm:num_requests_waiting").unwrap();
    assert_eq!(waiting.label("model_name"), Some("m\"odel"));
    let lora = samples.iter().find(|s| s.name == "vllm:lora_requests_info").unwrap();
    assert_eq!(lora.label("running_lora_adapters"), Some("sql-lora"));
}
