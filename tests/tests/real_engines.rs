//! The gateway in front of two real vLLM pods (CPU, SmolLM2-135M, `make vllm`): routing
//! on the engines' own metrics as they move, real prefix-cache hits, streams with usage,
//! tool calls as agents send them, the official OpenAI SDK's checks, the engines' own
//! errors, a LoRA adapter, an agent restart and a pod killed mid-stream.
//!
//! One test, in steps, because each pod takes 30-70 s to start and 3.5 GiB: the steps
//! share the pods and run in the order that leaves them usable (the kill is last).

use std::time::{Duration, Instant};

use infergate_core::config::Engine;
use infergate_e2e::engine_stack::{BusySeries, EngineStack, chosen, sse_events, wait_all_ready, words};
use infergate_e2e::engines::{VllmPod, vllm_installed};
use infergate_e2e::{ModelSpec, Stack, StackSpec};
use serde_json::{Value, json};

#[path = "../sdk/runner.rs"]
mod sdk;

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
    serves_tool_calls(&engines).await;
    satisfies_the_openai_sdk(&engines).await;
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

/// The function the tool requests offer: one JSON-schema parameter.
const TOOL: &str = "get_weather";
/// A question that calls for [`TOOL`].
const TOOL_PROMPT: &str = "What is the weather in Paris? Use the get_weather tool.";

/// A chat request with [`TOOL`] and `tool_choice`, greedy, streamed or not; `extra`
/// fields are added to it.
fn tool_request(tool_choice: Value, stream: bool, extra: Value) -> String {
    let mut body = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": TOOL_PROMPT}],
        "tools": [{"type": "function", "function": {
            "name": TOOL,
            "description": "Get the current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}},
                "required": ["city"]},
        }}],
        "tool_choice": tool_choice,
        "temperature": 0,
        "max_tokens": 48,
        "stream": stream,
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body.to_string()
}

/// The assistant's answer to a chat request, from the JSON body or put together from
/// the stream's deltas as an OpenAI client does.
#[derive(Debug, Default)]
struct Answer {
    content: String,
    /// (name, arguments) of each tool call, in index order.
    calls: Vec<(String, String)>,
    finish_reason: String,
}

impl Answer {
    fn of(reply: &infergate_e2e::Reply, stream: bool) -> Self {
        assert_eq!(reply.status, 200, "{}", reply.body);
        if !stream {
            let body = reply.json();
            let choice = &body["choices"][0];
            assert_eq!(choice["message"]["role"], "assistant", "{}", reply.body);
            let calls = choice["message"]["tool_calls"].as_array().cloned().unwrap_or_default();
            return Self {
                content: choice["message"]["content"].as_str().unwrap_or_default().to_string(),
                calls: calls
                    .iter()
                    .map(|call| {
                        assert_eq!(call["type"], "function", "{}", reply.body);
                        assert!(call["id"].as_str().is_some_and(|id| !id.is_empty()), "{}", reply.body);
                        let function = &call["function"];
                        (text(&function["name"]), text(&function["arguments"]))
                    })
                    .collect(),
                finish_reason: text(&choice["finish_reason"]),
            };
        }
        assert!(reply.header("content-type").is_some_and(|t| t.starts_with("text/event-stream")));
        assert!(reply.body.trim_end().ends_with("data: [DONE]"), "{}", reply.body);
        let mut answer = Self::default();
        for event in sse_events(&reply.body) {
            let Some(choice) = event["choices"].get(0) else { continue };
            let delta = &choice["delta"];
            answer.content.push_str(delta["content"].as_str().unwrap_or_default());
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                let index = call["index"].as_u64().expect("a tool call delta's index") as usize;
                if answer.calls.len() <= index {
                    answer.calls.resize(index + 1, Default::default());
                }
                let function = &call["function"];
                answer.calls[index].0.push_str(function["name"].as_str().unwrap_or_default());
                answer.calls[index].1.push_str(function["arguments"].as_str().unwrap_or_default());
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                answer.finish_reason = reason.to_string();
            }
        }
        answer
    }

    /// The one call's arguments, which must be a call of [`TOOL`] with a JSON object.
    fn one_call(&self) -> Value {
        assert_eq!(self.calls.len(), 1, "{self:?}");
        let (name, arguments) = &self.calls[0];
        assert_eq!(name, TOOL, "{self:?}");
        let arguments: Value = serde_json::from_str(arguments).unwrap_or_else(|e| panic!("{e}: {self:?}"));
        assert!(arguments.is_object(), "{self:?}");
        arguments
    }
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

/// Agents' tool calls through the gateway (engines/vllm/smollm2-tools.jinja and the
/// `xlam` parser): a named `tool_choice` is held to the function's schema by vLLM; with
/// `auto` the 135M model answers in text (every run here), which is asserted only to
/// be a well-formed answer of either kind; and an answer held to the template's
/// `<tool_call>[...]` format checks that the parser reads what the template asks for.
async fn serves_tool_calls(engines: &EngineStack) {
    // Without tools, the template renders the prompt the model's own template renders.
    let pod = format!("http://{}/tokenize", engines.pods[0].address);
    let tokens = |body: Value| {
        let request = engines.client.post(&pod).json(&body).send();
        async move { request.await.expect("the pod answers").json::<Value>().await.expect("JSON")["tokens"].clone() }
    };
    let messages = json!([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye"}]);
    let rendered = tokens(json!({"model": MODEL, "messages": messages, "add_generation_prompt": true})).await;
    let own = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
        <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n\
        <|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n";
    let expected = tokens(json!({"model": MODEL, "prompt": own, "add_special_tokens": false})).await;
    assert!(rendered.as_array().is_some_and(|t| !t.is_empty()), "{rendered}");
    assert_eq!(rendered, expected);

    let named = json!({"type": "function", "function": {"name": TOOL}});
    // The template's own format, as a model that calls the tool writes it.
    let held = json!({"structured_outputs": {"choice": [
        format!("<tool_call>[{{\"name\": \"{TOOL}\", \"arguments\": {{\"city\": \"Paris\"}}}}]</tool_call>")
    ]}});
    for stream in [false, true] {
        let reply =
            engines.stack.post("/v1/chat/completions", tool_request(json!("auto"), stream, json!({})), &[]).await;
        assert!(reply.header("x-infergate-decision").is_some_and(|d| d.contains("pool=smollm2")));
        let answer = Answer::of(&reply, stream);
        eprintln!("tool_choice auto, stream {stream}: {answer:?}");
        if answer.calls.is_empty() {
            assert!(!answer.content.trim().is_empty(), "stream {stream}: {answer:?}");
            assert!(["stop", "length"].contains(&answer.finish_reason.as_str()), "stream {stream}: {answer:?}");
        } else {
            for (name, arguments) in &answer.calls {
                assert_eq!(name, TOOL, "stream {stream}: {answer:?}");
                assert!(serde_json::from_str::<Value>(arguments).is_ok(), "stream {stream}: {answer:?}");
            }
            assert_eq!(answer.finish_reason, "tool_calls", "stream {stream}: {answer:?}");
        }

        let reply =
            engines.stack.post("/v1/chat/completions", tool_request(named.clone(), stream, json!({})), &[]).await;
        let answer = Answer::of(&reply, stream);
        assert_eq!(answer.one_call()["city"], "Paris", "stream {stream}: {answer:?}");

        let reply =
            engines.stack.post("/v1/chat/completions", tool_request(json!("auto"), stream, held.clone()), &[]).await;
        let answer = Answer::of(&reply, stream);
        assert_eq!(answer.one_call(), json!({"city": "Paris"}), "stream {stream}: {answer:?}");
        assert_eq!(answer.finish_reason, "tool_calls", "stream {stream}: {answer:?}");
    }
}

/// `tests/sdk/openai_sdk_checks.py`: what the official OpenAI SDK expects, with real
/// tool calls for a named function.
async fn satisfies_the_openai_sdk(engines: &EngineStack) {
    sdk::run_openai_sdk_checks(&engines.stack.gateway_url, MODEL, &["--tools", "calls", "--timeout", "120"]).await;
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
    // Dropping the load's connections makes vLLM abort the answers (tens of seconds of
    // decoding on CPU otherwise); the next step waits until both pods are idle.
    for request in load {
        request.abort();
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
