use super::*;

fn request(id: u64, arrival: f64, prompt: &[u8], output: u32, adapter: Option<&str>) -> SimRequest {
    SimRequest::from_text(id, arrival, prompt, output, adapter.map(String::from), 16)
}

/// Runs the engine alone until it is idle; returns (id, ttft) for each first token.
fn run_to_idle(engine: &mut Engine, mut now: f64) -> (Vec<(u64, f64)>, f64) {
    let mut firsts = Vec::new();
    for _ in 0..1_000_000 {
        match engine.step(now) {
            Some(step) => {
                now += step.duration;
                for event in step.events {
                    if let EngineEvent::FirstToken { id, at, .. } = event {
                        firsts.push((id, at));
                    }
                }
            }
            None => match engine.wake_at(now) {
                Some(t) => now = t,
                None => break,
            },
        }
    }
    (firsts, now)
}

#[test]
fn a_repeated_long_prompt_is_much_faster_the_second_time() {
    let mut engine = Engine::new(EngineProfile::LLAMA_3_1_8B_H100);
    let prompt = vec![b'p'; 4 * 6000];
    engine.submit(request(1, 0.0, &prompt, 4, None));
    let (firsts, now) = run_to_idle(&mut engine, 0.0);
    let cold = firsts[0].1;
    engine.submit(request(2, now, &prompt, 4, None));
    let (firsts, _) = run_to_idle(&mut engine, now);
    let warm = firsts[0].1 - now;
    assert!(warm * 10.0 < cold, "cold {cold:.4}s, warm {warm:.4}s");
    let stats = engine.stats(0.0);
    assert!(stats.prefix_cache_hits_total >= 5_900, "{stats:?}");
}

#[test]
fn a_slowed_engine_reports_latencies_in_real_seconds() {
    let prompt = vec![b'q'; 4 * 2000];
    let mut normal = Engine::new(EngineProfile::LLAMA_3_1_8B_H100);
    let mut slowed = Engine::new(EngineProfile::LLAMA_3_1_8B_H100).reporting_time_scale(10.0);
    for engine in [&mut normal, &mut slowed] {
        engine.submit(request(1, 0.0, &prompt, 8, None));
        run_to_idle(engine, 0.0);
    }
    assert!(normal.ttft.sum > 0.0 && normal.ttft.count == 1);
    assert!((slowed.ttft.sum - 10.0 * normal.ttft.sum).abs() < 1e-9, "{} vs {}", slowed.ttft.sum, normal.ttft.sum);
    assert!((slowed.prefill.sum - 10.0 * normal.prefill.sum).abs() < 1e-9);
    assert!((slowed.itl.sum - 10.0 * normal.itl.sum).abs() < 1e-9);
    let (normal_busy, slowed_busy) = (normal.stats(0.0).busy_seconds, slowed.stats(0.0).busy_seconds);
    assert!((slowed_busy - 10.0 * normal_busy).abs() < 1e-9);
    // Token counts are not times: they stay.
    assert_eq!(normal.stats(0.0).prompt_tokens_total, slowed.stats(0.0).prompt_tokens_total);
}

#[test]
fn a_full_kv_cache_makes_requests_wait() {
    let profile = EngineProfile { num_gpu_blocks: 100, ..EngineProfile::TINY };
    let mut engine = Engine::new(profile);
    // Each request needs 30 prompt blocks + 2 output blocks: three fit, the rest wait.
    for id in 0..6u64 {
        let prompt: Vec<u8> = (0..16 * 4 * 30).map(|i| b'a' + ((i as u64 + id * 7) % 26) as u8).collect();
        engine.submit(request(id, 0.0, &prompt, 32, None));
    }
    engine.step(0.0).unwrap();
    let stats = engine.stats(0.0);
    assert_eq!((stats.running, stats.waiting), (3, 3), "{stats:?}");
    assert!(stats.kv_cache_usage > 0.9);
}

#[test]
fn a_non_resident_adapter_pays_its_load_and_evicts_the_lru_one() {
    let profile = EngineProfile { max_loras: 2, lora_load_ms: 50.0, ..EngineProfile::TINY };
    let mut engine = Engine::new(profile);
    let prompt = vec![b'x'; 64];
    engine.submit(request(1, 0.0, &prompt, 1, Some("a")));
    let (firsts, now) = run_to_idle(&mut engine, 0.0);
    assert!(firsts[0].1 >= 0.05, "the first request waited for the load: {firsts:?}");
    engine.submit(request(2, now, &prompt, 1, Some("b")));
    let (_, now) = run_to_idle(&mut engine, now);
    let arrival = now;
    engine.submit(request(3, arrival, &prompt, 1, Some("a")));
    let (firsts, now) = run_to_idle(&mut engine, arrival);
    assert!(firsts[0].1 - arrival < 0.05, "a resident adapter loads nothing: {firsts:?}");
    engine.submit(request(4, now, &prompt, 1, Some("c")));
    run_to_idle(&mut engine, now);
    let stats = engine.stats(now + 1.0);
    assert_eq!(stats.resident_adapters, ["a", "c"], "b was the least recently used");
    assert_eq!(stats.lora_loads_total, 3);
}

#[test]
fn inter_token_latency_grows_with_batch_size() {
    let profile = EngineProfile::LLAMA_3_1_8B_H100;
    let single = profile.step_seconds(1, 0);
    let big = profile.step_seconds(128, 0);
    assert!(big > single * 1.5, "{single} vs {big}");

    let mut engine = Engine::new(profile);
    for id in 0..64 {
        engine.submit(request(id, 0.0, &[b'q'; 64], 50, None));
    }
    let mut durations = Vec::new();
    let mut now = 0.0;
    while let Some(step) = engine.step(now) {
        now += step.duration;
        durations.push(step.duration);
    }
    assert!(durations[5] > single, "a batch of 64 decodes slower than one");
}

#[test]
fn the_same_requests_give_the_same_timings() {
    let run = || {
        let mut engine = Engine::new(EngineProfile::TINY);
        for id in 0..20u64 {
            let prompt: Vec<u8> = (0..(100 + id * 37)).map(|i| b'a' + (i % 26) as u8).collect();
            engine.submit(request(id, id as f64 * 0.001, &prompt, 5 + id as u32, None));
        }
        run_to_idle(&mut engine, 0.0).0
    };
    assert_eq!(run(), run());
}

/// A prompt of `tokens` of its own text (4 bytes a token), starting with `shared`.
fn long_prompt(shared: &[u8], tokens: usize, salt: u8) -> Vec<u8> {
    let mut prompt = shared.to_vec();
    prompt.extend((prompt.len()..tokens * 4).map(|i| b'a' + ((i * 7 + usize::from(salt)) % 26) as u8));
    prompt
}

#[test]
fn long_context_prefill_grows_with_attention_as_the_flop_count_says() {
    let profile = EngineProfile::LLAMA_3_1_8B_H100_LONG;
    // 128k tokens: 3.28 s of matrix work and 9.0 s of attention (docs/model-sim.md).
    let expected = profile.prefill_seconds(131_072, 0);
    assert!((expected - 12.3).abs() < 0.1, "{expected}");
    let mut engine = Engine::new(profile);
    engine.submit(request(1, 0.0, &long_prompt(b"", 131_072, 0), 2, None));
    let (firsts, _) = run_to_idle(&mut engine, 0.0);
    // Chunked into 16 steps of 8,192 tokens, each with its step overhead.
    let ttft = firsts[0].1;
    assert!(ttft > expected && ttft < expected + 0.2, "ttft {ttft} s against {expected} s of compute");
    // The short-prompt calibration has no attention term: linear only.
    assert_eq!(EngineProfile::LLAMA_3_1_8B_H100.prefill_seconds(131_072, 0), 131_072.0 / 20_000.0);
}

#[test]
fn a_cached_prefix_still_costs_the_new_tokens_attention_over_it() {
    let profile = EngineProfile::LLAMA_3_1_8B_H100_LONG;
    let shared = long_prompt(b"", 120_000, 1);
    let mut engine = Engine::new(profile);
    engine.submit(request(1, 0.0, &shared, 1, None));
    let (_, now) = run_to_idle(&mut engine, 0.0);
    // The next turn adds 6,000 tokens: cheap next to a cold start, dear next to a short
    // prompt, because each new token attends to the 120k before it.
    engine.submit(request(2, now, &long_prompt(&shared, 126_000, 2), 1, None));
    let (firsts, _) = run_to_idle(&mut engine, now);
    let warm = firsts[0].1 - now;
    let attention = profile.attention_seconds(120_000, 126_000);
    assert!(attention > 0.7, "{attention}");
    assert!(warm > attention + 6_000.0 / 40_000.0 && warm < 1.0, "warm turn {warm} s");
    assert!(warm * 10.0 < profile.prefill_seconds(126_000, 0));
}

#[test]
fn a_decode_step_reads_every_running_requests_context() {
    let step_of = |prompt_tokens: usize| {
        let mut engine = Engine::new(EngineProfile::LLAMA_3_1_8B_H100_FP8_KV);
        engine.submit(request(1, 0.0, &long_prompt(b"", prompt_tokens, 3), 3, None));
        // The prefill steps, then a decode step.
        let mut last = 0.0;
        let mut now = 0.0;
        while let Some(step) = engine.step(now) {
            now += step.duration;
            last = step.duration;
        }
        last
    };
    let (short, long) = (step_of(1_000), step_of(200_000));
    // 199,000 more tokens of FP8 KV at 19.6 ns each: 3.9 ms more per step.
    assert!((long - short - 199_000.0 * 19.6e-9).abs() < 1e-4, "{short} vs {long}");
}

#[test]
fn a_transferred_prompt_is_not_computed_again() {
    let prompt = vec![b't'; 4 * 6000];
    let mut whole = Engine::new(EngineProfile::LLAMA_3_1_8B_H100);
    whole.submit(request(1, 0.0, &prompt, 4, None));
    let (whole_firsts, _) = run_to_idle(&mut whole, 0.0);
    let mut decode = Engine::new(EngineProfile::LLAMA_3_1_8B_H100);
    decode.submit(request(1, 0.0, &prompt, 4, None).with_transferred_kv());
    let (decode_firsts, _) = run_to_idle(&mut decode, 0.0);
    let (cold, transferred) = (whole_firsts[0].1, decode_firsts[0].1);
    assert!(transferred * 20.0 < cold, "whole {cold:.4}s, transferred {transferred:.4}s");
    // The transfer is no prefix-cache hit, but the blocks are cached here afterwards.
    let stats = decode.stats(0.0);
    assert_eq!(stats.prefix_cache_hits_total, 0, "{stats:?}");
    decode.submit(request(2, 1.0, &prompt, 4, None));
    run_to_idle(&mut decode, 1.0);
    assert!(decode.stats(0.0).prefix_cache_hits_total >= 5_900);
}

#[test]
fn prefills_keep_their_order_when_a_request_ahead_of_them_finishes() {
    // vLLM serves its running requests in the order they were admitted, and a finished
    // one leaves the others in place: the older of two long prefills gets the token
    // budget first and finishes first, whatever finished before them.
    let mut engine = Engine::new(EngineProfile::LLAMA_3_1_8B_H100);
    engine.submit(request(1, 0.0, b"a short one", 1, None));
    engine.submit(request(2, 0.0, &vec![b'a'; 4 * 20_000], 4, None));
    engine.submit(request(3, 0.0, &vec![b'b'; 4 * 20_000], 4, None));
    let (firsts, _) = run_to_idle(&mut engine, 0.0);
    let first_of = |id: u64| firsts.iter().find(|(i, _)| *i == id).map(|(_, at)| *at);
    let (older, newer) = (first_of(2).expect("2 prefilled"), first_of(3).expect("3 prefilled"));
    assert!(older < newer, "the older prefill at {older:.3}s, the newer at {newer:.3}s");
}
