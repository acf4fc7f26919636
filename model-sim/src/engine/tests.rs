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
                    if let EngineEvent::FirstToken { id, at } = event {
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
