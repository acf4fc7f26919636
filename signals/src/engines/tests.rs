//! Each adapter on the real samples in `tests/data/`, with hand-checked values.

use infergate_core::config::Engine;

use super::*;

const V1: &str = include_str!("../../tests/data/vllm-v1_qwen3-0.6b.txt");
const V0: &str = include_str!("../../tests/data/vllm-v0_qwen2.5-coder-1.5b.txt");
const SGLANG: &str = include_str!("../../tests/data/sglang_qwen3-0.6b.txt");
const TRITON: &str = include_str!("../../tests/data/triton-trtllm_inflight-batcher.txt");

#[test]
fn every_real_sample_is_recognized() {
    for (text, engine) in [(V1, Engine::Vllm), (V0, Engine::Vllm), (SGLANG, Engine::Sglang), (TRITON, Engine::Triton)] {
        assert_eq!(detect(&exposition::parse(text).unwrap()), Some(engine));
        assert!(scrape(Engine::Auto, text).is_ok());
    }
    assert!(matches!(scrape(Engine::Auto, "other_metric 1\n"), Err(SignalsError::Unrecognized)));
}

#[test]
fn sglang_sample() {
    let s = signals(Engine::Sglang, SGLANG).unwrap();
    assert_eq!((s.waiting, s.running, s.kv_cache_usage), (0.0, 0.0, 0.0));
    // No cache_config_info in this build: the KV size comes from max_total_num_tokens.
    assert_eq!((s.block_size, s.num_gpu_blocks), (Some(1), Some(92_962)));
}

#[test]
fn triton_sample() {
    let s = signals(Engine::Triton, TRITON).unwrap();
    assert_eq!((s.waiting, s.running), (1.0, 1.0));
    assert!((s.kv_cache_usage - 0.4875).abs() < 1e-9, "the reported fraction, as published");
    assert_eq!((s.block_size, s.num_gpu_blocks), (Some(64), Some(6_239)));
}

#[test]
fn trtllm_serve_and_llama_cpp() {
    let trtllm = "trtllm_num_requests_waiting 3\ntrtllm_num_requests_running 5\ntrtllm_kv_cache_utilization 0.25\ntrtllm_kv_cache_tokens_per_block 32\n";
    let s = signals(Engine::Auto, trtllm).unwrap();
    assert_eq!((s.waiting, s.running, s.kv_cache_usage, s.block_size), (3.0, 5.0, 0.25, Some(32)));
    let llama = "llamacpp:requests_processing 2\nllamacpp:requests_deferred 4\nllamacpp:kv_cache_usage_ratio 0.5\n";
    let s = signals(Engine::Auto, llama).unwrap();
    assert_eq!((s.waiting, s.running, s.kv_cache_usage), (4.0, 2.0, 0.5));
}

#[test]
fn a_negative_gauge_is_no_reading_so_the_snapshot_stays_valid() {
    // Found by the prometheus_adapters fuzz target: vLLM's "unknown" is -1, and a
    // negative signal made the agent build a snapshot every gateway refuses.
    let running = "vllm:num_requests_running{model_name=\"m\"} 3.0\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n";
    let two = format!(
        "vllm:num_requests_waiting{{engine=\"0\"}} 2.0\nvllm:num_requests_waiting{{engine=\"1\"}} -1.0\n{running}"
    );
    let signals = signals(Engine::Vllm, &two).unwrap();
    assert_eq!((signals.waiting, signals.running), (2.0, 3.0));
    let only_unknown = format!("vllm:num_requests_waiting{{model_name=\"m\"}} -1.0\n{running}");
    assert!(super::signals(Engine::Vllm, &only_unknown).is_err(), "no usable reading is a failed scrape");
}
