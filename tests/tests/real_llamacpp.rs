//! The gateway in front of two real llama.cpp pods (`llama-server` on CPU, SmolLM2-135M
//! Q4_1, `make llamacpp`): a chat, a text completion and a stream with usage through the
//! gateway, routing on the pods' own `llamacpp:*` gauges, llama.cpp's own error for a
//! prompt longer than its context, and a pod killed mid-stream.
//!
//! Opt-in (`make test-llamacpp`, feature `llamacpp`): building llama-server takes 6-11
//! minutes on 2 cores, so `make test` leaves it out. One test, in steps that share the pods, in
//! the order that leaves them usable (the kill is last). llama.cpp exports no KV-cache
//! gauge, and nothing here asserts what the gateway makes of its absence.

use std::time::{Duration, Instant};

use infergate_core::config::Engine;
use infergate_e2e::engine_stack::{BusySeries, EngineStack, chosen, sse_events, wait_all_ready, words};
use infergate_e2e::{ModelSpec, Reply, Stack, StackSpec};
use infergate_harness::llamacpp::{LlamaCppPod, llamacpp_installed};
use serde_json::json;

const MODEL: &str = "smollm2";
const BUSY: BusySeries = BusySeries { running: "llamacpp:requests_processing", waiting: "llamacpp:requests_deferred" };

/// A chat for the test's one model.
async fn chat(engines: &EngineStack, prompt: &str, max_tokens: u64) -> Reply {
    engines.chat(MODEL, prompt, max_tokens).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_routes_real_llamacpp_pods_on_their_own_signals() {
    if let Err(missing) = llamacpp_installed() {
        panic!("{missing}");
    }
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let mut pods = vec![LlamaCppPod::llamacpp(dir.path(), &[]), LlamaCppPod::llamacpp(dir.path(), &[])];
    wait_all_ready(&mut pods, &client, "llama.cpp").await;
    let spec = StackSpec {
        pools: vec![("smollm2", 2)],
        models: vec![ModelSpec::base(MODEL, "smollm2")],
        external_pods: Some((Engine::LlamaCpp, pods.iter().map(|p| p.address).collect())),
        scrape_interval_ms: 200,
        request_timeout_ms: 120_000,
        ..StackSpec::default()
    };
    let stack = Stack::start(spec).await;
    let mut engines = EngineStack { stack, pods, client, busy: BUSY };

    let step = Instant::now();
    answers_completes_and_streams_with_usage(&engines).await;
    eprintln!("step: chat, completion and stream passed ({:.1} s)", step.elapsed().as_secs_f64());
    let step = Instant::now();
    avoids_the_pod_kept_busy(&engines).await;
    eprintln!("step: the busy pod was avoided ({:.1} s)", step.elapsed().as_secs_f64());
    let step = Instant::now();
    passes_the_engines_error_through(&engines).await;
    eprintln!("step: llama.cpp's error reached the client ({:.1} s)", step.elapsed().as_secs_f64());
    let step = Instant::now();
    survives_a_pod_killed_mid_stream(&mut engines).await;
    eprintln!("step: the survivor served every request after the kill ({:.1} s)", step.elapsed().as_secs_f64());
}

async fn answers_completes_and_streams_with_usage(engines: &EngineStack) {
    let reply = chat(engines, "What is the capital of France? Answer in one word.", 16).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let text = reply.json()["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_string();
    assert!(!text.trim().is_empty(), "{}", reply.body);
    assert!(reply.header("x-infergate-decision").is_some_and(|d| d.contains("pool=smollm2")));
    assert!(engines.index_of(&chosen(&reply)).is_some(), "{:?}", reply.header("x-infergate-decision"));

    // The legacy text completion API.
    let body = json!({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 8});
    let reply = engines.stack.post("/v1/completions", body.to_string(), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.json()["choices"][0]["text"].as_str().is_some_and(|t| !t.is_empty()), "{}", reply.body);

    let body = json!({
        "model": MODEL, "messages": [{"role": "user", "content": "Count to five."}], "max_tokens": 16,
        "stream": true, "stream_options": {"include_usage": true},
    });
    let reply = engines.stack.post("/v1/chat/completions", body.to_string(), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.header("content-type").is_some_and(|t| t.starts_with("text/event-stream")));
    let events = sse_events(&reply.body);
    let content: String =
        events.iter().filter_map(|e| e["choices"][0]["delta"]["content"].as_str()).collect::<Vec<_>>().concat();
    assert!(!content.trim().is_empty(), "{}", reply.body);
    let last = events.last().cloned().unwrap_or_default();
    assert_eq!(last["choices"], json!([]), "the usage chunk comes last: {last}");
    assert!(last["usage"]["completion_tokens"].as_u64().is_some_and(|t| t > 0), "last event: {last}");
    assert!(reply.body.trim_end().ends_with("data: [DONE]"));

    // The agent reads llama.cpp's gauges: decisions are soon made on them.
    let started = Instant::now();
    loop {
        let reply = chat(engines, "Say hi.", 2).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        if reply.header("x-infergate-decision").is_some_and(|d| d.contains("basis=signals")) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no decision on the pods' signals: {:?}",
            reply.header("x-infergate-decision")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(engines.stack.stat("infergate.decisions.signals").await.unwrap_or(0) >= 1, "routed on real signals");
}

async fn avoids_the_pod_kept_busy(engines: &EngineStack) {
    engines.until_idle().await;
    // Six long answers straight to pod 0: its 2 slots process two, 4 are deferred. At
    // about 30 tokens/s per slot they keep it busy for about 15 s, long enough for the
    // check, short enough to wait for: closing a connection does not reliably cancel
    // its request in llama.cpp (engines/llamacpp/README.md).
    let load = engines.load_pod_directly(MODEL, 0, 6, 150, 3.0).await;
    let busy = &engines.pods[0];
    let (processing, deferred) = (
        busy.metric(&engines.client, "llamacpp:requests_processing").await,
        busy.metric(&engines.client, "llamacpp:requests_deferred").await,
    );
    eprintln!("pod 0: {processing} processing, {deferred} deferred");
    // Two scrapes and a push for the gateway to see it.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut on_idle_pod = 0;
    for i in 0..4 {
        let reply = chat(engines, &format!("Say hello {i}."), 4).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        if engines.index_of(&chosen(&reply)) == Some(1) {
            on_idle_pod += 1;
        } else {
            eprintln!("went to the busy pod: {:?}", reply.header("x-infergate-decision"));
        }
    }
    assert_eq!(on_idle_pod, 4, "every request avoided the pod with {processing} processing and {deferred} deferred");
    // The deferred requests were served in their turn.
    for request in load {
        let response = request.await.expect("the load task").expect("a load request");
        assert_eq!(response.status(), 200);
    }
}

async fn passes_the_engines_error_through(engines: &EngineStack) {
    engines.until_idle().await;
    // About 3,000 tokens, longer than a slot's 1,024: llama.cpp itself refuses it.
    for stream in [false, true] {
        let body = json!({"model": MODEL, "messages": [{"role": "user", "content": words("long", 3_000)}],
            "max_tokens": 16, "stream": stream});
        let reply = engines.stack.post("/v1/chat/completions", body.to_string(), &[]).await;
        eprintln!("a prompt too long (stream: {stream}): {} {}", reply.status, reply.body);
        assert!((400..500).contains(&reply.status), "{} {}", reply.status, reply.body);
        let error = &reply.json()["error"];
        assert!(error["message"].is_string() && error["type"].is_string(), "not an OpenAI error: {}", reply.body);
        assert!(engines.index_of(&chosen(&reply)).is_some(), "the engine answered, not the gateway");
    }
    // The gateway's own refusals keep OpenAI's shape.
    let body = json!({"model": "no-such-model", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4});
    let reply = engines.stack.post("/v1/chat/completions", body.to_string(), &[]).await;
    assert_eq!((reply.status, reply.error_code()), (404, "model_not_found".to_string()));
}

async fn survives_a_pod_killed_mid_stream(engines: &mut EngineStack) {
    engines.until_idle().await;
    let victim = engines.cut_a_stream_by_killing_its_pod(MODEL).await;
    let survivor = 1 - victim;
    // Every next request succeeds at once (on a retry if the killed pod came first),
    // and once the agent has seen the pod go, the gateway chooses the survivor.
    let started = Instant::now();
    let mut by_choice = 0;
    for i in 0.. {
        let reply = chat(engines, &format!("Still there {i}?"), 4).await;
        assert_eq!(reply.status, 200, "request {i} after the kill: {}", reply.body);
        if engines.index_of(&chosen(&reply)) == Some(survivor) {
            by_choice += 1;
        } else {
            by_choice = 0;
        }
        if by_choice == 3 {
            eprintln!("{} requests after the kill, all answered", i + 1);
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the gateway still chooses the killed pod");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
