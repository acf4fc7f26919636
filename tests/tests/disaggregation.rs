//! Prefill/decode disaggregation end to end in real Envoy, with model-sim pods that
//! speak vLLM's `kv_transfer_params` handover: one prefill-only pod and two
//! decode-only pods, every request split.
//!
//! In gateway mode the filter sends the prefill leg itself (`dispatch_http_call` to
//! the pool's cluster, the prefill pod named in the `override_host` header) and puts
//! the returned params into the request; in sidecar mode the decode pods' emulated
//! llm-d sidecar does it, told the prefill pod by `x-prefiller-host-port`. Either way
//! streamed and whole answers come back complete, the prefill pod counts the prefill
//! legs and the decode pods the decode legs. A prefill pod that is dead, or too slow,
//! costs no client request: the filter serves it whole and counts why. A decode pod
//! that cannot fetch the KV (its prefill pod let go of it, or died after answering)
//! costs none either: the filter sends the request whole again. The last request of
//! each run is long (about 60k tokens), so it is routed before its body ends and its
//! prefill leg waits for the rest. A request held in the flow-control queue sends its
//! prefill leg when the worker's tick releases it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use infergate_core::config::{BandSettings, DisaggMode, Disaggregation, FlowControlSettings, SplitPolicy};
use infergate_core::wire::{header, stat};
use infergate_e2e::stack::PodShaper;
use infergate_e2e::upload::Upload;
use infergate_e2e::{ModelSpec, Reply, Stack, StackSpec};
use infergate_model_sim::engine::EngineProfile;
use infergate_model_sim::server::{KvRole, PdSettings, PodSpec};
use serde_json::json;

/// A prompt of about this many tokens (4 characters each).
const PROMPT_TOKENS: usize = 1_500;

/// One pool `a` of three pods: pod 0 only prefills, pods 1 and 2 only decode (and run
/// llm-d's sidecar, with `sidecar`); every request is split.
fn spec(mode: DisaggMode, sidecar: bool, prefill_timeout_ms: u64) -> StackSpec {
    spec_with_lease(mode, sidecar, prefill_timeout_ms, PdSettings::default().lease_s)
}

/// As [`spec`], the prefill pod holding a prompt's KV for `lease_s` simulated seconds.
fn spec_with_lease(mode: DisaggMode, sidecar: bool, prefill_timeout_ms: u64, lease_s: f64) -> StackSpec {
    let shaper = PodShaper(Arc::new(move |index, spec: PodSpec| {
        let pd = match index {
            0 => PdSettings { role: KvRole::Producer, lease_s, ..PdSettings::default() },
            _ => PdSettings { role: KvRole::Consumer, sidecar, ..PdSettings::default() },
        };
        PodSpec { pd, ..spec }
    }));
    let disaggregation =
        Disaggregation { mode, split: SplitPolicy::Always, prefill_timeout_ms, ..Disaggregation::default() };
    let mut spec = StackSpec {
        pools: vec![("a", 3)],
        models: vec![ModelSpec::base("m", "a")],
        max_body_bytes: 1024 * 1024,
        // Room for a 100k-token prompt; prefill fast enough for a test.
        profile: EngineProfile { num_gpu_blocks: 8_000, prefill_tokens_per_s: 500_000.0, ..EngineProfile::TINY },
        disaggregation: Some((disaggregation, 1)),
        pod_shaper: Some(shaper),
        ..StackSpec::default()
    };
    // Hashing reads the first 64 KiB of a prompt: a longer one is routed before its
    // body ends.
    spec.routing.prefix.max_blocks = 1024;
    spec
}

fn prompt(seed: usize, tokens: usize) -> String {
    let words = format!("request {seed} asks about the tides of the northern sea ");
    words.repeat(tokens * 4 / words.len() + 1)
}

/// A chat body with `model` first and each message's `role` before its `content`, as
/// most clients write them (what routing before the body ends needs).
fn body(seed: usize, tokens: usize, stream: bool) -> String {
    let content = prompt(seed, tokens);
    format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{content}"}}],"max_tokens":12,"stream":{stream}}}"#)
}

async fn send(stack: &Stack, body: &str) -> Reply {
    stack.post("/v1/chat/completions", body.to_string(), &[]).await
}

/// The reply is a whole answer: a completion with its text, or a stream of tokens that
/// ends with `[DONE]`.
fn assert_whole(reply: &Reply, streamed: bool) {
    assert_eq!(reply.status, 200, "{}", reply.body);
    if streamed {
        assert!(reply.body.contains("\"delta\""), "no tokens: {}", reply.body);
        assert!(reply.body.trim_end().ends_with("data: [DONE]"), "cut short: {}", reply.body);
    } else {
        let answer = reply.json();
        let text = answer["choices"][0]["message"]["content"].as_str().unwrap_or_default();
        assert!(!text.is_empty(), "no text: {}", reply.body);
        assert!(answer["choices"][0]["finish_reason"].is_string(), "{}", reply.body);
    }
}

/// A counter of a pod's `/metrics`, 0 if absent.
async fn pod_counter(stack: &Stack, pod: std::net::SocketAddr, name: &str) -> f64 {
    let text = stack.client().get(format!("http://{pod}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|line| line.starts_with(name) && line.get(name.len()..name.len() + 1) == Some("{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

const PREFILL_LEGS: &str = "model_sim:pd_prefill_legs_total";
const DECODE_LEGS: &str = "model_sim:pd_decode_legs_total";

/// Prefill legs and decode legs the pods counted: (prefill pod's, decode pods').
async fn legs(stack: &Stack) -> ((f64, f64), (f64, f64)) {
    let pods = &stack.fleet.pods;
    let prefill = (pod_counter(stack, pods[0], PREFILL_LEGS).await, pod_counter(stack, pods[0], DECODE_LEGS).await);
    let mut decode = (0.0, 0.0);
    for &pod in &pods[1..] {
        decode.0 += pod_counter(stack, pod, PREFILL_LEGS).await;
        decode.1 += pod_counter(stack, pod, DECODE_LEGS).await;
    }
    (prefill, decode)
}

async fn fallbacks(stack: &Stack) -> Vec<(String, u64)> {
    let mut counted = Vec::new();
    for reason in ["dispatch", "timeout", "reset", "status", "bad_json", "no_kv_params", "body", "decode"] {
        let n = stack.stat(&format!("{}{reason}", stat::PD_FALLBACK_PREFIX)).await.unwrap_or(0);
        if n > 0 {
            counted.push((reason.to_string(), n));
        }
    }
    counted
}

/// Sends `count` requests, half streamed; checks each is whole, served by a decode pod
/// and split.
async fn run_split_requests(stack: &Stack, count: usize) -> Vec<Reply> {
    let decode_pods: Vec<String> = stack.fleet.pods[1..].iter().map(ToString::to_string).collect();
    let mut replies = Vec::new();
    for i in 0..count {
        let streamed = i % 2 == 1;
        let reply = send(stack, &body(i, PROMPT_TOKENS, streamed)).await;
        assert_whole(&reply, streamed);
        let served_by = reply.served_by().unwrap_or_default().to_string();
        assert!(decode_pods.contains(&served_by), "served by {served_by}, not a decode pod");
        let decision = reply.header(header::DECISION).unwrap_or_default();
        assert!(decision.contains("pd=split reason=always"), "{decision}");
        assert!(decision.contains(&format!("prefill={}", stack.fleet.pods[0])), "{decision}");
        replies.push(reply);
    }
    replies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_gateway_mode_the_filter_sends_the_prefill_leg_and_the_decode_pod_streams_the_answer() {
    let stack = Stack::start(spec(DisaggMode::Gateway, false, 10_000)).await;
    let replies = run_split_requests(&stack, 5).await;
    for reply in &replies {
        let decision = reply.header(header::DECISION).unwrap_or_default();
        assert!(decision.contains("pd_prefill=ok"), "{decision}");
    }
    // A long prompt (about 60k tokens) is routed while the client still sends; its
    // prefill leg waits for the rest of the body.
    let long = body(99, 60_000, true);
    let upload = Upload::start(stack.config.gateway.listen, long.as_bytes(), 100 * 1024).await;
    let routed_early = async {
        while stack.stat("infergate.requests.routed_early").await != Some(1) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), routed_early).await.expect("routed before the body ended");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(stack.stat(stat::PD_PREFILL_OK).await, Some(5), "no prefill leg before the whole body");
    let (status, answer) = upload.finish().await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("pd_prefill=ok") && answer.contains("data: [DONE]"), "{answer}");
    assert_eq!(stack.stat(stat::PD_SPLIT).await, Some(6));
    assert_eq!(stack.stat(stat::PD_PREFILL_OK).await, Some(6));
    assert_eq!(fallbacks(&stack).await, vec![]);
    // The dispatched prefill legs reached the pod the override_host header named, the
    // only one that prefills (the decode pods refuse a prefill leg with a 400), and
    // each decode pod took its prompt's KV from it.
    let (prefill, decode) = legs(&stack).await;
    assert_eq!(prefill, (6.0, 0.0), "the prefill pod: prefill legs, decode legs");
    assert_eq!(decode, (0.0, 6.0), "the decode pods: prefill legs, decode legs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_sidecar_mode_the_decode_pods_sidecar_runs_the_leg_on_the_named_prefill_pod() {
    let stack = Stack::start(spec(DisaggMode::Sidecar, true, 10_000)).await;
    run_split_requests(&stack, 4).await;
    assert_eq!(stack.stat(stat::PD_SPLIT).await, Some(4));
    assert_eq!(stack.stat(stat::PD_PREFILL_OK).await.unwrap_or(0), 0, "the gateway sent no leg");
    let (prefill, decode) = legs(&stack).await;
    assert_eq!(prefill, (4.0, 0.0));
    assert_eq!(decode, (0.0, 4.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_prefill_pod_costs_no_request_and_each_fallback_is_counted() {
    // No agent: nothing tells the gateway the pod died, so every split goes to it.
    let stack = Stack::start(StackSpec { start_agent: false, ..spec(DisaggMode::Gateway, false, 10_000) }).await;
    stack.kill_pod(stack.fleet.pods[0]).await;
    for i in 0..4 {
        let reply = send(&stack, &body(i, PROMPT_TOKENS, i % 2 == 1)).await;
        assert_whole(&reply, i % 2 == 1);
        let decision = reply.header(header::DECISION).unwrap_or_default();
        assert!(decision.contains("pd_fallback=status"), "{decision}");
    }
    assert_eq!(fallbacks(&stack).await, vec![("status".to_string(), 4)]);
    for &pod in &stack.fleet.pods[1..] {
        assert_eq!(pod_counter(&stack, pod, DECODE_LEGS).await, 0.0, "served whole: no KV to fetch");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefill_leg_past_its_timeout_is_served_whole() {
    let stack = Stack::start(spec(DisaggMode::Gateway, false, 300)).await;
    stack.fault(stack.fleet.pods[0], json!({"added_latency_ms": 2_000})).await;
    let started = std::time::Instant::now();
    let reply = send(&stack, &body(1, PROMPT_TOKENS, true)).await;
    assert_whole(&reply, true);
    assert!(started.elapsed() < Duration::from_millis(1_500), "waited out the slow pod: {:?}", started.elapsed());
    let decision = reply.header(header::DECISION).unwrap_or_default();
    assert!(decision.contains("pd_fallback=timeout"), "{decision}");
    assert_eq!(fallbacks(&stack).await, vec![("timeout".to_string(), 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decode_leg_that_cannot_fetch_its_kv_is_sent_whole_again() {
    // The prefill pod lets go of every prompt's KV at once: each decode pod's claim
    // fails and it answers 500, as when the prefill pod dies between the two legs.
    let stack = Stack::start(spec_with_lease(DisaggMode::Gateway, false, 10_000, 0.0)).await;
    for i in 0..4 {
        let streamed = i % 2 == 1;
        let reply = send(&stack, &body(i, PROMPT_TOKENS, streamed)).await;
        assert_whole(&reply, streamed);
        let decision = reply.header(header::DECISION).unwrap_or_default();
        assert!(decision.contains("pd_prefill=ok") && decision.contains("pd_fallback=decode"), "{decision}");
    }
    assert_eq!(fallbacks(&stack).await, vec![("decode".to_string(), 4)]);
    assert_eq!(stack.stat(stat::PD_PREFILL_OK).await, Some(4));
    let (prefill, decode) = legs(&stack).await;
    assert_eq!((prefill, decode), ((4.0, 0.0), (0.0, 0.0)), "no decode leg got its KV");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefill_pod_killed_under_load_fails_no_client_request() {
    let stack = Arc::new(Stack::start(spec(DisaggMode::Gateway, false, 10_000)).await);
    let (stop, sent) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let clients: Vec<_> = (0..4)
        .map(|client| {
            let (stack, stop, sent) = (Arc::clone(&stack), Arc::clone(&stop), Arc::clone(&sent));
            tokio::spawn(async move {
                let mut failures = Vec::new();
                let mut i = client * 10_000;
                while !stop.load(Ordering::SeqCst) {
                    let streamed = i % 2 == 1;
                    let reply = send(&stack, &body(i, PROMPT_TOKENS, streamed)).await;
                    sent.fetch_add(1, Ordering::SeqCst);
                    let whole = reply.status == 200
                        && if streamed {
                            reply.body.trim_end().ends_with("data: [DONE]")
                        } else {
                            reply.json()["choices"].is_array()
                        };
                    if !whole {
                        failures.push(format!("{}: {}", reply.status, reply.body));
                    }
                    i += 1;
                }
                failures
            })
        })
        .collect();
    while sent.load(Ordering::SeqCst) < 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let split_before = stack.stat(stat::PD_PREFILL_OK).await.unwrap_or(0);
    stack.kill_pod(stack.fleet.pods[0]).await;
    let killed_at = sent.load(Ordering::SeqCst);
    while sent.load(Ordering::SeqCst) < killed_at + 40 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut failures = Vec::new();
    for client in clients {
        failures.extend(client.await.unwrap());
    }
    let total = sent.load(Ordering::SeqCst);
    assert!(
        failures.is_empty(),
        "{} of {total} requests failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    assert!(split_before > 0, "requests were split before the kill");
    // After the kill, requests in flight to the dead pod fell back; once the agent saw
    // it gone, the rest were served whole by the decision (no prefill pod).
    let whole = stack.stat(stat::PD_WHOLE).await.unwrap_or(0);
    let counted = fallbacks(&stack).await;
    let fell_back: u64 = counted.iter().map(|(_, n)| n).sum();
    eprintln!("{total} requests, {split_before} split before the kill; then {whole} whole, fallbacks {counted:?}");
    assert!(whole + fell_back > 0, "the requests after the kill were served whole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_request_held_in_the_gateway_queue_sends_its_prefill_leg_when_released() {
    // Standard requests may wait 20 s; sheddable probes give up after 300 ms.
    let band = |ms| BandSettings { max_wait_ms: Some(ms), ..BandSettings::default() };
    let mut flow = FlowControlSettings { enabled: true, ..FlowControlSettings::default() };
    flow.bands.standard = band(20_000);
    flow.bands.sheddable = band(300);
    let stack =
        Arc::new(Stack::start(StackSpec { flow_control: flow, ..spec(DisaggMode::Gateway, false, 10_000) }).await);
    for &pod in &stack.fleet.pods {
        stack.pin(pod, 9.0, 16.0, 0.95).await;
    }
    stack
        .wait_until("the gateway to see the pool saturated", Duration::from_secs(5), || async {
            let probe = body(0, 10, false);
            stack.post("/v1/chat/completions", probe, &[("x-infergate-criticality", "sheddable")]).await.status == 429
        })
        .await;
    let legs_before = stack.stat(stat::PD_PREFILL_OK).await.unwrap_or(0);
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let stack = Arc::clone(&stack);
            tokio::spawn(async move { (i % 2 == 1, send(&stack, &body(100 + i, PROMPT_TOKENS, i % 2 == 1)).await) })
        })
        .collect();
    stack
        .wait_until("four requests held", Duration::from_secs(5), || async {
            stack.stat("infergate.flow.queued").await.unwrap_or(0) >= 4
        })
        .await;
    assert_eq!(stack.stat(stat::PD_PREFILL_OK).await.unwrap_or(0), legs_before, "no prefill leg while held");
    for &pod in &stack.fleet.pods {
        stack.unpin(pod).await;
    }
    for client in clients {
        let (streamed, reply) = client.await.expect("the client task");
        assert_whole(&reply, streamed);
        let decision = reply.header(header::DECISION).unwrap_or_default();
        assert!(decision.contains("pd=split") && decision.contains("pd_prefill=ok"), "{decision}");
    }
    assert!(stack.stat("infergate.flow.released").await.unwrap_or(0) >= 4);
    assert_eq!(stack.stat(stat::PD_PREFILL_OK).await, Some(legs_before + 4));
    assert_eq!(fallbacks(&stack).await, vec![]);
    let (prefill, decode) = legs(&stack).await;
    assert_eq!(prefill.0, (legs_before + 4) as f64, "every leg reached the prefill pod");
    assert_eq!(decode.1, (legs_before + 4) as f64, "every decode leg took its KV");
}
