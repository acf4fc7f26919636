//! The gateway in front of two real vLLM pods (CPU, SmolLM2-135M, `make vllm`): routing
//! on the engines' own metrics as they move, real prefix-cache hits, streams with usage,
//! the engines' own errors, a LoRA adapter, an agent restart and a pod killed mid-stream.
//!
//! One test, in steps, because each pod takes 30-70 s to start and 3.5 GiB: the steps
//! share the pods and run in the order that leaves them usable (the kill is last).

use std::time::{Duration, Instant};

use infergate_core::config::Engine;
use infergate_e2e::engine_stack::{BusySeries, EngineStack, chosen, sse_events, wait_all_ready, words};
use infergate_e2e::engines::{VllmPod, vllm_installed};
use infergate_e2e::{ModelSpec, Stack, StackSpec};
use serde_json::json;

const MODEL: &str = "smollm2";
const ADAPTER: &str = "ad1";
/// An adapter infergate.yaml declares and no pod serves.
const MISSING_ADAPTER: &str = "ad-missing";
const BUSY: BusySeries = BusySeries { running: "vllm:num_requests_running", waiting: "vllm:num_requests_waiting" };

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_routes_real_vllm_pods_on_their_own_signals() {
    if let Err(missing) = vllm_installed() {
        panic!("{missing}");
    }
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    // Both pods serve the adapter: vLLM loads adapters per pod at start, and a pool's
    // pods serve the same models.
    let mut pods = vec![VllmPod::vllm(true, dir.path()), VllmPod::vllm(true, dir.path())];
    wait_all_ready(&mut pods, &client, "vLLM").await;
    let spec = StackSpec {
        pools: vec![("smollm2", 2)],
        models: vec![
            ModelSpec::base(MODEL, "smollm2"),
            ModelSpec::lora(ADAPTER, "smollm2", ADAPTER),
            ModelSpec::lora(MISSING_ADAPTER, "smollm2", MISSING_ADAPTER),
        ],
        external_pods: Some((Engine::Vllm, pods.iter().map(|p| p.address).collect())),
        // A real scrape takes milliseconds on an idle pod and more under load.
        scrape_interval_ms: 200,
        request_timeout_ms: 120_000,
        ..StackSpec::default()
    };
    let stack = Stack::start(spec).await;
    let mut engines = EngineStack { stack, pods, client, busy: BUSY };

    answers_and_streams_with_usage(&engines).await;
    avoids_the_pod_kept_busy(&engines).await;
    sends_a_shared_prefix_to_the_pod_that_caches_it(&engines).await;
    passes_the_engines_errors_through(&engines).await;
    serves_the_adapter(&engines).await;
    recovers_signals_after_an_agent_restart(&mut engines).await;
    survives_a_pod_killed_mid_stream(&mut engines).await;
}

async fn answers_and_streams_with_usage(engines: &EngineStack) {
    let reply = engines.chat(MODEL, "What is the capital of France? Answer in one word.", 16).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let text = reply.json()["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_string();
    assert!(!text.trim().is_empty(), "{}", reply.body);
    assert!(reply.header("x-infergate-decision").is_some_and(|d| d.contains("pool=smollm2")));

    let body = json!({
        "model": MODEL, "messages": [{"role": "user", "content": "Count to five."}], "max_tokens": 16,
        "stream": true, "stream_options": {"include_usage": true},
    });
    let reply = engines.stack.post("/v1/chat/completions", body.to_string(), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.header("content-type").is_some_and(|t| t.starts_with("text/event-stream")));
    let events = sse_events(&reply.body);
    let usage = events.last().map(|e| e["usage"].clone()).unwrap_or_default();
    assert!(usage["completion_tokens"].as_u64().is_some_and(|t| t > 0), "last event: {:?}", events.last());
    assert!(reply.body.trim_end().ends_with("data: [DONE]"));
    // The filter timed the stream's first chunk against its prediction.
    let observed = engines.stack.stat("infergate.pool.smollm2.decisions").await.unwrap_or(0);
    assert!(observed >= 2, "decisions counted: {observed}");
    assert!(engines.stack.stat("infergate.decisions.signals").await.unwrap_or(0) >= 1, "routed on real signals");
}

async fn avoids_the_pod_kept_busy(engines: &EngineStack) {
    engines.until_idle().await;
    // Eight long answers straight to pod 0: 4 run and 4 wait there.
    let load = engines.load_pod_directly(MODEL, 0, 8, 200, 1.0).await;
    // Two scrapes and a push for the gateway to see it.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut on_idle_pod = 0;
    for i in 0..4 {
        let reply = engines.chat(MODEL, &format!("Say hello {i}."), 4).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        if engines.index_of(&chosen(&reply)) == Some(1) {
            on_idle_pod += 1;
        }
    }
    assert_eq!(on_idle_pod, 4, "every request avoided the pod with 4 running and 4 waiting");
    for request in load {
        let _ = request.await;
    }
}

async fn sends_a_shared_prefix_to_the_pod_that_caches_it(engines: &EngineStack) {
    engines.until_idle().await;
    // About 1,200 tokens shared: 9 of vLLM's blocks of 128.
    let shared = words("context", 1_200);
    let first = engines.chat(MODEL, &format!("{shared}\nQuestion 0: summarise."), 4).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let owner = engines.index_of(&chosen(&first)).expect("the first request's pod");
    let other = 1 - owner;
    let hits = |pod: usize| engines.pods[pod].metric(&engines.client, "vllm:prefix_cache_hits_total");
    let (owner_before, other_before) = (hits(owner).await, hits(other).await);
    for turn in 1..4 {
        let reply = engines.chat(MODEL, &format!("{shared}\nQuestion {turn}: summarise."), 4).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(
            engines.index_of(&chosen(&reply)),
            Some(owner),
            "turn {turn}: {:?}",
            reply.header("x-infergate-decision")
        );
        let cached = reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
        assert!(cached >= 896, "turn {turn}: vLLM served {cached} prompt tokens from its cache");
    }
    let (owner_after, other_after) = (hits(owner).await, hits(other).await);
    assert!(owner_after - owner_before >= 3.0 * 896.0, "the owner's hit counter: {owner_before} -> {owner_after}");
    assert_eq!(other_after, other_before, "the other pod saw none of it");
}

async fn passes_the_engines_errors_through(engines: &EngineStack) {
    // Longer than the pods' 2,048-token context: vLLM itself refuses it.
    let reply = engines.chat(MODEL, &words("long", 3_000), 16).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    let message = reply.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("maximum context length"), "{}", reply.body);
    // An adapter the config declares but no pod serves: vLLM's 404 reaches the client.
    let reply = engines.chat(MISSING_ADAPTER, "hello", 4).await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert!(reply.json()["error"]["message"].as_str().is_some_and(|m| m.contains(MISSING_ADAPTER)), "{}", reply.body);
    // The gateway's own refusals keep OpenAI's shape.
    let reply = engines.chat("no-such-model", "hello", 4).await;
    assert_eq!((reply.status, reply.error_code()), (404, "model_not_found".to_string()));
}

async fn serves_the_adapter(engines: &EngineStack) {
    let reply = engines.chat(ADAPTER, "Say hello.", 8).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["model"], ADAPTER, "{}", reply.body);
}

async fn recovers_signals_after_an_agent_restart(engines: &mut EngineStack) {
    engines.stack.kill_agent();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    // Without the agent, snapshots age out: the gateway still answers on load alone.
    let reply = engines.chat(MODEL, "Are you there?", 4).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    engines.stack.start_agent().await;
    let started = Instant::now();
    loop {
        let reply = engines.chat(MODEL, "And now?", 4).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        if reply.header("x-infergate-decision").is_some_and(|d| d.contains("basis=signals")) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no signal-based decision after the restart");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn survives_a_pod_killed_mid_stream(engines: &mut EngineStack) {
    engines.until_idle().await;
    engines.cut_a_stream_by_killing_its_pod(MODEL).await;
    // Every next request is served by the survivor, at once (retry) and then by choice.
    for i in 0..5 {
        let reply = engines.chat(MODEL, &format!("Still there {i}?"), 4).await;
        assert_eq!(reply.status, 200, "request {i} after the kill: {}", reply.body);
    }
}
