//! Each adapter on the real samples in `tests/data/`, with hand-checked values, and on
//! the older and sparser formats reconstructed there: which signals are read, which are
//! unknown, and what a refusal says.

use infergate_core::config::Engine;

use super::*;

const V1: &str = include_str!("../../tests/data/vllm-v1_qwen3-0.6b.txt");
const V0: &str = include_str!("../../tests/data/vllm-v0_qwen2.5-coder-1.5b.txt");
const SGLANG: &str = include_str!("../../tests/data/sglang_qwen3-0.6b.txt");
const TRITON: &str = include_str!("../../tests/data/triton-trtllm_inflight-batcher.txt");
const TRITON_V0_7: &str = include_str!("../../tests/data/triton-trtllm_v0.7.0.txt");
const VLLM_0_7_1: &str = include_str!("../../tests/data/vllm-v1_0.7.1.txt");
const SGLANG_0_3_6: &str = include_str!("../../tests/data/sglang_0.3.6.txt");
const SGLANG_PRIORITY: &str = include_str!("../../tests/data/sglang_0.5.11_priority.txt");
const SGLANG_FRESH: &str = include_str!("../../tests/data/sglang_fresh-pod.txt");
const TRTLLM_HISTOGRAMS: &str = include_str!("../../tests/data/trtllm-serve_1.1_histograms.txt");
const TRTLLM_KV_ONLY: &str = include_str!("../../tests/data/trtllm-serve_1.3_kv-only.txt");
const LLAMA_NO_KV: &str = include_str!("../../tests/data/llamacpp_b5500-no-kv.txt");

fn load(s: &PodSignals) -> (Option<f64>, Option<f64>, Option<f64>) {
    (s.waiting, s.running, s.kv_cache_usage)
}

#[test]
fn every_sample_is_recognized_by_its_families() {
    for (text, engine) in [
        (V1, Engine::Vllm),
        (V0, Engine::Vllm),
        (VLLM_0_7_1, Engine::Vllm),
        (SGLANG, Engine::Sglang),
        (SGLANG_0_3_6, Engine::Sglang),
        (SGLANG_PRIORITY, Engine::Sglang),
        (SGLANG_FRESH, Engine::Sglang),
        (TRITON, Engine::Triton),
        (TRITON_V0_7, Engine::Triton),
        (TRTLLM_KV_ONLY, Engine::Trtllm),
        (LLAMA_NO_KV, Engine::LlamaCpp),
    ] {
        let samples = exposition::parse(text).unwrap();
        let families = samples.iter().map(|s| s.name).chain(exposition::declared(text));
        assert_eq!(detect_families(families), Some(engine), "{text}");
        assert!(scrape(Engine::Auto, text).is_ok(), "{text}");
    }
    assert!(matches!(scrape(Engine::Auto, "other_metric 1\n"), Err(SignalsError::Unrecognized)));
}

#[test]
fn sglang_sample() {
    let s = signals(Engine::Sglang, SGLANG).unwrap();
    assert_eq!(load(&s), (Some(0.0), Some(0.0), Some(0.0)));
    // No page gauges or cache_config_info in this build: max_total_num_tokens, in pages of one.
    assert_eq!((s.block_size, s.num_gpu_blocks), (Some(1), Some(92_962)));
}

#[test]
fn triton_sample_prefers_the_reported_fraction() {
    let s = signals(Engine::Triton, TRITON).unwrap();
    assert_eq!((s.waiting, s.running), (Some(1.0), Some(1.0)));
    assert!((s.kv_cache_usage.unwrap() - 0.4875).abs() < 1e-9, "the reported fraction, as published");
    assert_eq!((s.block_size, s.num_gpu_blocks), (Some(64), Some(6_239)));
}

#[test]
fn triton_before_v0_18_derives_waiting_and_kv_use_as_the_backend_later_did() {
    let scraped = scrape(Engine::Triton, TRITON_V0_7).unwrap();
    let s = &scraped.signals;
    assert_eq!((s.waiting, s.running), (Some(0.0), Some(1.0)), "waiting = max(active 0 - scheduled 1, 0)");
    assert!((s.kv_cache_usage.unwrap() - 1.0 / 6_239.0).abs() < 1e-12, "used / max");
    assert!(scraped.unknown.is_empty());
}

#[test]
fn triton_without_kv_statistics_has_unknown_kv_use_not_an_empty_cache() {
    let text = "nv_trt_llm_request_metrics{request_type=\"active\"} 3\n\
                nv_trt_llm_request_metrics{request_type=\"scheduled\"} 2\n\
                nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"used\"} 0\n\
                nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"max\"} 0\n";
    let scraped = scrape(Engine::Triton, text).unwrap();
    assert_eq!(load(&scraped.signals), (Some(1.0), Some(2.0), None));
    assert_eq!(scraped.unknown.len(), 1);
    assert!(scraped.unknown[0].contains("fraction"), "{:?}", scraped.unknown);
}

#[test]
fn triton_without_the_backend_metrics_names_the_backend_release() {
    let err = scrape(Engine::Triton, "nv_inference_request_success{model=\"m\",version=\"1\"} 4\n").unwrap_err();
    assert!(
        err.to_string().contains("no nv_trt_llm_ series at all; the TensorRT-LLM backend exports them from v0.7.0"),
        "{err}"
    );
}

#[test]
fn vllm_0_7_1_reads_kv_use_from_its_old_name_and_adapters_stay_unknown() {
    let scraped = scrape(Engine::Vllm, VLLM_0_7_1).unwrap();
    let s = &scraped.signals;
    assert_eq!(load(s), (Some(1.0), Some(2.0), Some(0.12)));
    assert_eq!((s.max_loras, s.block_size), (None, None), "no lora_requests_info, no cache_config_info");
    assert_eq!(scraped.counters.itl_count, Some(98.0), "time_per_output_token before inter_token_latency");
    assert!(scraped.unknown.is_empty());
}

#[test]
fn sglang_0_3_6_reads_the_load_and_time_per_output_token() {
    let scraped = scrape(Engine::Sglang, SGLANG_0_3_6).unwrap();
    assert_eq!(load(&scraped.signals), (Some(3.0), Some(1.0), Some(0.02)));
    assert_eq!((scraped.signals.block_size, scraped.signals.num_gpu_blocks), (None, None));
    assert_eq!((scraped.counters.itl_seconds, scraped.counters.itl_count), (Some(0.9), Some(40.0)));
}

#[test]
fn sglang_priority_series_are_not_counted_twice_and_pages_come_from_their_gauges() {
    let s = signals(Engine::Sglang, SGLANG_PRIORITY).unwrap();
    assert_eq!(load(&s), (Some(5.0), Some(3.0), Some(0.25)), "the priority=\"\" totals only");
    assert_eq!((s.block_size, s.num_gpu_blocks), (Some(16), Some(5_810)), "not max_total_num_tokens in pages of one");
}

#[test]
fn a_fresh_sglang_pod_is_a_pod_with_unknown_load_not_a_failed_scrape() {
    let scraped = scrape(Engine::Sglang, SGLANG_FRESH).unwrap();
    assert_eq!(load(&scraped.signals), (None, None, None));
    assert_eq!(scraped.unknown, ["sglang:num_queue_reqs", "sglang:num_running_reqs", "sglang:token_usage"]);
}

#[test]
fn trtllm_serve_with_latency_histograms_only_is_a_pod_with_unknown_load() {
    let scraped = scrape(Engine::Trtllm, TRTLLM_HISTOGRAMS).unwrap();
    assert_eq!(load(&scraped.signals), (None, None, None));
    assert_eq!(scraped.unknown.len(), 3);
    assert_eq!((scraped.counters.itl_seconds, scraped.counters.itl_count), (Some(0.02), Some(1.0)));
    // Its families are other engines' names too: auto-detection does not guess.
    assert!(matches!(scrape(Engine::Auto, TRTLLM_HISTOGRAMS), Err(SignalsError::Unrecognized)));
}

#[test]
fn trtllm_serve_derives_kv_use_from_block_counts_and_leaves_unset_gauges_unknown() {
    let scraped = scrape(Engine::Trtllm, TRTLLM_KV_ONLY).unwrap();
    assert_eq!(load(&scraped.signals), (None, None, Some(0.25)), "used 200 / max 800");
    assert_eq!(scraped.signals.num_gpu_blocks, Some(800));
    assert_eq!(scraped.unknown, ["trtllm_num_requests_waiting", "trtllm_num_requests_running"]);
}

#[test]
fn trtllm_serve_json_metrics_are_named_as_such() {
    let err = scrape(Engine::Trtllm, "[{\"numActiveRequests\": 1}]").unwrap_err();
    assert!(err.to_string().contains("scrape /prometheus/metrics"), "{err}");
    assert!(matches!(scrape(Engine::Auto, " []"), Err(SignalsError::Json)));
}

#[test]
fn llama_cpp_without_the_kv_gauge_has_unknown_kv_use() {
    let scraped = scrape(Engine::LlamaCpp, LLAMA_NO_KV).unwrap();
    assert_eq!(load(&scraped.signals), (Some(2.0), Some(1.0), None));
    assert_eq!(scraped.unknown, ["llamacpp:kv_cache_usage_ratio"]);
    let with_kv = "llamacpp:requests_processing 2\nllamacpp:requests_deferred 4\nllamacpp:kv_cache_usage_ratio 0.5\n";
    assert_eq!(load(&signals(Engine::Auto, with_kv).unwrap()), (Some(4.0), Some(2.0), Some(0.5)));
    let err = scrape(Engine::LlamaCpp, "process_cpu_seconds_total 1\n").unwrap_err();
    assert!(err.to_string().contains("only when started with --metrics"), "{err}");
}

#[test]
fn trtllm_serve_1_3() {
    let trtllm = "trtllm_num_requests_waiting 3\ntrtllm_num_requests_running 5\ntrtllm_kv_cache_utilization 0.25\ntrtllm_kv_cache_tokens_per_block 32\n";
    let s = signals(Engine::Auto, trtllm).unwrap();
    assert_eq!((load(&s), s.block_size), ((Some(3.0), Some(5.0), Some(0.25)), Some(32)));
}

#[test]
fn a_negative_gauge_is_no_reading_so_the_snapshot_stays_valid() {
    // Found by the prometheus_adapters fuzz target: vLLM's "unknown" is -1, and a
    // negative signal made the agent build a snapshot every gateway refuses.
    let running = "vllm:num_requests_running{model_name=\"m\"} 3.0\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n";
    let two = format!(
        "vllm:num_requests_waiting{{engine=\"0\"}} 2.0\nvllm:num_requests_waiting{{engine=\"1\"}} -1.0\n{running}"
    );
    let s = signals(Engine::Vllm, &two).unwrap();
    assert_eq!((s.waiting, s.running), (Some(2.0), Some(3.0)));
    let only_unknown = format!("vllm:num_requests_waiting{{model_name=\"m\"}} -1.0\n{running}");
    let scraped = scrape(Engine::Vllm, &only_unknown).unwrap();
    assert_eq!(scraped.signals.waiting, None, "vLLM's -1 is unknown");
    assert_eq!(scraped.unknown, ["vllm:num_requests_waiting"]);
}
