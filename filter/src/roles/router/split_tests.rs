//! Split requests of a disaggregated pool: the sidecar's header, the gateway's prefill
//! leg and its rewrite of the client's body, every way the leg can fail (each served
//! whole, counted and explained), and the prefill pod released exactly once.

use infergate_core::config::{Criticality, DisaggMode, Disaggregation, RoutingConfig, SplitPolicy};
use infergate_core::snapshot::PodSignals;
use infergate_core::wire::{header, stat};
use serde_json::{Value, json};

use crate::host::events::Flow;
use crate::host::fake::{Caller, HttpCall, Stream, take_logs};
use crate::shared::pod_loads::PodLoads;
use crate::test_support::{
    Gateway, MODEL, PODS, chat, idle, pod, role_config, router_config_with, router_role, routing, snapshot_with,
};

const PREFILL: &str = PODS[0];
const TIMEOUT_MS: u64 = 2_000;

fn pd_routing(mode: DisaggMode, split: SplitPolicy) -> RoutingConfig {
    let mut routing = routing();
    let pool = routing.pools.iter_mut().find(|p| p.name == "llama").expect("the example's llama pool");
    pool.disaggregation = Some(Disaggregation {
        mode,
        split,
        prefill_endpoints: vec![pod(PREFILL)],
        decode_endpoints: vec![pod(PODS[1]), pod(PODS[2])],
        prefill_timeout_ms: TIMEOUT_MS,
        ..Disaggregation::default()
    });
    routing
}

/// One router worker over `routing`, its pods idle.
fn gateway_with(routing: RoutingConfig, early: bool) -> Gateway {
    let gateway = Gateway::with_router_config(1, &router_config_with(routing.clone(), true, early));
    let now = gateway.envoy.now_ms();
    assert_eq!(gateway.push_snapshot(&snapshot_with(1, now, &[idle(), idle(), idle()], routing)), 204);
    gateway
}

fn pd_gateway(mode: DisaggMode) -> Gateway {
    gateway_with(pd_routing(mode, SplitPolicy::Always), false)
}

fn in_flight(gateway: &Gateway, address: &str) -> u32 {
    PodLoads::read(&*gateway.routers[0].host).get(pod(address)).in_flight
}

/// The pending prefill tokens of the two decode pods together.
fn decode_pending(gateway: &Gateway) -> u64 {
    let loads = PodLoads::read(&*gateway.routers[0].host);
    loads.get(pod(PODS[1])).pending_prefill_tokens + loads.get(pod(PODS[2])).pending_prefill_tokens
}

/// A client's body with the fields the prefill leg rewrites.
fn client_body() -> Value {
    json!({
        "model": MODEL, "messages": [{"role": "user", "content": "tell me a story"}],
        "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 64, "temperature": 0.5,
    })
}

fn send(gateway: &Gateway, body: &Value) -> (Stream, Flow) {
    let mut stream = gateway.routers[0].stream();
    let flow = stream.post_json("/v1/chat/completions", &[("authorization", "Bearer k")], body);
    (stream, flow)
}

fn only_call(gateway: &Gateway) -> HttpCall {
    let calls = gateway.envoy.http_calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    calls[0].clone()
}

fn params() -> Value {
    json!({"do_remote_prefill": true, "do_remote_decode": false, "remote_host": "127.0.0.1", "remote_port": 8001,
           "remote_engine_id": "e1", "remote_block_ids": [1, 2], "remote_request_id": "r1", "tp_size": 1})
}

fn prefill_answer() -> Vec<u8> {
    json!({"id": "p", "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}],
           "kv_transfer_params": params()})
    .to_string()
    .into_bytes()
}

fn decision(stream: &mut Stream) -> String {
    let decode = stream.request_header(header::ENDPOINT).map(crate::test_support::first_endpoint).unwrap_or_default();
    stream.respond_headers(&decode, 200, "text/event-stream", false);
    stream.response_header(header::DECISION).unwrap_or_default().to_string()
}

#[test]
fn in_sidecar_mode_the_decode_pod_is_told_its_prefill_pod() {
    let gateway = pd_gateway(DisaggMode::Sidecar);
    let (mut stream, flow) = send(&gateway, &chat("hello"));
    assert_eq!(flow, Flow::Continue);
    let endpoints = stream.request_header(header::ENDPOINT).unwrap_or_default().to_string();
    assert!(!endpoints.contains(PREFILL) && !endpoints.is_empty(), "decode pods only: {endpoints}");
    assert_eq!(stream.request_header(header::PREFILLER_HOST_PORT), Some(PREFILL));
    assert!(gateway.envoy.http_calls().is_empty(), "the sidecar sends the prefill leg");
    assert_eq!((gateway.envoy.stat(stat::PD_SPLIT), in_flight(&gateway, PREFILL)), (1, 1));
    // The leg ends with the decode pod's headers; the stream's end does not count it again.
    let explained = decision(&mut stream);
    assert!(explained.contains("pd=split reason=always") && explained.contains(PREFILL), "{explained}");
    assert_eq!(in_flight(&gateway, PREFILL), 0);
    stream.end();
    assert_eq!(in_flight(&gateway, PREFILL), 0);
}

#[test]
fn a_clients_own_prefiller_header_never_reaches_a_pod() {
    for routing in [routing(), pd_routing(DisaggMode::Gateway, SplitPolicy::Never)] {
        let gateway = gateway_with(routing, false);
        let mut stream = gateway.routers[0].stream();
        stream.post_json("/v1/chat/completions", &[(header::PREFILLER_HOST_PORT, "10.6.6.6:80")], &chat("hi"));
        assert!(stream.request_header(header::ENDPOINT).is_some());
        assert_eq!(stream.request_header(header::PREFILLER_HOST_PORT), None);
    }
}

#[test]
fn a_whole_decision_in_a_disaggregated_pool_is_counted_and_sends_nothing() {
    let gateway = gateway_with(pd_routing(DisaggMode::Gateway, SplitPolicy::Never), false);
    let (mut stream, flow) = send(&gateway, &client_body());
    assert_eq!(flow, Flow::Continue);
    assert!(gateway.envoy.http_calls().is_empty());
    assert_eq!((gateway.envoy.stat(stat::PD_WHOLE), gateway.envoy.stat(stat::PD_SPLIT)), (1, 0));
    assert!(decision(&mut stream).contains("pd=whole reason=never"));
}

#[test]
fn the_prefill_leg_goes_to_the_cluster_the_platform_named() {
    // Envoy Gateway names a pool's cluster after its HTTPRoute rule, not `pool-<name>`.
    let routing = pd_routing(DisaggMode::Gateway, SplitPolicy::Always);
    let mut role = router_role(routing.clone(), true, false, None);
    role.pool_clusters.insert("llama".into(), "httproute/ai/infergate/rule/0".into());
    let gateway = Gateway::with_router_config(1, &role_config(role));
    let now = gateway.envoy.now_ms();
    assert_eq!(gateway.push_snapshot(&snapshot_with(1, now, &[idle(), idle(), idle()], routing)), 204);
    let (_stream, flow) = send(&gateway, &client_body());
    assert_eq!(flow, Flow::Pause, "held for the prefill leg");
    assert_eq!(only_call(&gateway).cluster, "httproute/ai/infergate/rule/0");
}

#[test]
fn in_gateway_mode_the_prefill_leg_goes_first_and_its_params_reach_the_decode_pod() {
    let gateway = pd_gateway(DisaggMode::Gateway);
    let client = client_body();
    let (mut stream, flow) = send(&gateway, &client);
    assert_eq!(flow, Flow::Pause, "held for the prefill leg");
    let call = only_call(&gateway);
    assert_eq!(call.cluster, "pool-llama");
    assert_eq!(call.timeout_ms, TIMEOUT_MS);
    assert_eq!(call.header(":path"), Some("/v1/chat/completions"));
    assert_eq!(call.header(":method"), Some("POST"));
    assert_eq!(call.header("content-type"), Some("application/json"));
    assert_eq!(call.header("authorization"), Some("Bearer k"));
    assert_eq!(call.header(header::ENDPOINT), Some(PREFILL));
    let sent = call.json();
    assert_eq!((sent["max_tokens"].clone(), sent["stream"].clone()), (json!(1), json!(false)));
    assert!(sent.get("stream_options").is_none());
    assert_eq!(sent["kv_transfer_params"]["do_remote_decode"], true);
    assert_eq!(sent["messages"], client["messages"]);
    assert!(!stream.resumed());
    assert_eq!(in_flight(&gateway, PREFILL), 1);

    gateway.envoy.advance_ms(40);
    stream.answer_call(call.token, Some((200, &prefill_answer())));
    assert!(stream.resumed());
    let forwarded: Value = serde_json::from_slice(stream.forwarded_body()).unwrap_or(Value::Null);
    let mut expected = client.clone();
    expected["kv_transfer_params"] = params();
    assert_eq!(forwarded, expected, "the client's body with the returned params, nothing else changed");
    assert_eq!(stream.request_header("content-length"), Some(stream.forwarded_body().len().to_string().as_str()));
    assert_eq!(gateway.envoy.stat(stat::PD_PREFILL_OK), 1);
    assert_eq!(gateway.envoy.samples(stat::PD_PREFILL_MS), vec![40]);
    assert_eq!(in_flight(&gateway, PREFILL), 0, "released when the leg answered");
    let explained = decision(&mut stream);
    assert!(explained.contains("pd_prefill=ok prefill_ms=40"), "{explained}");
    stream.end();
    assert_eq!(in_flight(&gateway, PREFILL), 0);
    assert!(fallback_stats(&gateway).iter().all(|(_, n)| *n == 0));
}

fn fallback_stats(gateway: &Gateway) -> Vec<(&'static str, i64)> {
    super::split::Fallback::ALL
        .iter()
        .map(|why| (why.as_str(), gateway.envoy.stat(&format!("{}{}", stat::PD_FALLBACK_PREFIX, why.as_str()))))
        .collect()
}

/// Runs a split request whose prefill leg fails by `fail`, and checks it was served
/// whole: the client's body unchanged to the decode pod, the reason counted and
/// explained, the prefill pod released.
fn served_whole(reason: &str, fail: impl FnOnce(&Gateway, &mut Stream, Option<HttpCall>)) {
    let gateway = pd_gateway(DisaggMode::Gateway);
    if reason == "dispatch" {
        gateway.envoy.fail("dispatch_http_call");
    }
    let client = client_body();
    let (mut stream, flow) = send(&gateway, &client);
    let call = gateway.envoy.http_calls().first().cloned();
    fail(&gateway, &mut stream, call);
    assert!(flow == Flow::Continue || stream.resumed(), "{reason}: the request went on");
    assert!(stream.reply().is_none(), "{reason}: the client got no error");
    let forwarded: Value = serde_json::from_slice(stream.forwarded_body()).unwrap_or(Value::Null);
    assert_eq!(forwarded, client, "{reason}: the client's body as it came");
    let counted: Vec<_> = fallback_stats(&gateway).into_iter().filter(|(_, n)| *n > 0).collect();
    assert_eq!(counted, vec![(reason, 1)], "{reason}");
    assert_eq!(gateway.envoy.stat(stat::PD_PREFILL_OK), 0);
    assert_eq!(in_flight(&gateway, PREFILL), 0, "{reason}: the prefill pod released");
    let explained = decision(&mut stream);
    assert!(explained.contains(&format!("pd_fallback={reason}")), "{reason}: {explained}");
    // The decode pod prefills the whole prompt now, not one token.
    assert!(decode_pending(&gateway) > 1, "{reason}: {} pending on the decode pod", decode_pending(&gateway));
    stream.end();
    assert_eq!(decode_pending(&gateway), 0, "{reason}: the decode pod's pending prefill released");
    assert_eq!(in_flight(&gateway, PREFILL), 0);
    assert!(in_flight(&gateway, PODS[1]) + in_flight(&gateway, PODS[2]) == 0, "{reason}: the decode pod released");
}

fn answer(stream: &mut Stream, call: Option<HttpCall>, answer: Option<(u16, &[u8])>) {
    let call = call.expect("a prefill call");
    stream.answer_call(call.token, answer);
}

#[test]
fn a_prefill_leg_that_cannot_be_sent_is_served_whole() {
    served_whole("dispatch", |_, _, call| assert!(call.is_none()));
}

#[test]
fn a_prefill_leg_that_times_out_is_served_whole() {
    // Envoy answers a call past its timeout with its own 504.
    served_whole("timeout", |gateway, stream, call| {
        gateway.envoy.advance_ms(TIMEOUT_MS);
        answer(stream, call, Some((504, b"upstream request timeout")));
    });
    served_whole("timeout", |gateway, stream, call| {
        gateway.envoy.advance_ms(TIMEOUT_MS + 5);
        answer(stream, call, None);
    });
}

#[test]
fn a_prefill_leg_reset_before_its_answer_is_served_whole() {
    served_whole("reset", |_, stream, call| answer(stream, call, None));
}

#[test]
fn a_prefill_leg_refused_by_its_pod_is_served_whole() {
    served_whole("status", |_, stream, call| answer(stream, call, Some((503, b"{\"error\":{}}"))));
}

#[test]
fn a_prefill_answer_that_is_not_json_is_served_whole() {
    served_whole("bad_json", |_, stream, call| answer(stream, call, Some((200, b"<html>"))));
}

#[test]
fn a_prefill_answer_without_params_is_served_whole() {
    served_whole("no_kv_params", |_, stream, call| answer(stream, call, Some((200, b"{\"choices\":[]}"))));
}

#[test]
fn a_body_that_cannot_be_rewritten_is_served_whole() {
    served_whole("body", |gateway, stream, call| {
        gateway.envoy.fail("set_request_body");
        answer(stream, call, Some((200, &prefill_answer())));
    });
}

#[test]
fn a_stream_that_ends_before_its_prefill_answer_releases_the_leg_once() {
    let gateway = pd_gateway(DisaggMode::Gateway);
    let (mut first, _) = send(&gateway, &client_body());
    let (mut second, _) = send(&gateway, &client_body());
    assert_eq!(in_flight(&gateway, PREFILL), 2);
    let calls = gateway.envoy.http_calls();
    first.end();
    assert_eq!(in_flight(&gateway, PREFILL), 1);
    // An answer after the end goes nowhere in Envoy; here it would find nothing to do.
    first.answer_call(calls[0].token, Some((200, &prefill_answer())));
    assert!(!first.resumed());
    assert_eq!(in_flight(&gateway, PREFILL), 1, "the second request still counts");
    // The second's answer, its response and its end release it once.
    second.answer_call(calls[1].token, Some((200, &prefill_answer())));
    assert!(second.resumed());
    decision(&mut second);
    second.end();
    assert_eq!(in_flight(&gateway, PREFILL), 0);
    assert_eq!(PodLoads::read(&*gateway.routers[0].host), PodLoads::default(), "nothing left counted");
}

#[test]
fn a_sidecar_leg_is_released_once_whatever_ends_first() {
    let gateway = pd_gateway(DisaggMode::Sidecar);
    let (mut first, _) = send(&gateway, &chat("one"));
    let (mut second, _) = send(&gateway, &chat("two"));
    assert_eq!(in_flight(&gateway, PREFILL), 2);
    decision(&mut first);
    first.end();
    assert_eq!(in_flight(&gateway, PREFILL), 1);
    // Reset before any response: the end releases it.
    second.end();
    assert_eq!(PodLoads::read(&*gateway.routers[0].host), PodLoads::default());
}

#[test]
fn an_answer_to_another_call_is_not_taken_for_the_prefill_legs() {
    let gateway = pd_gateway(DisaggMode::Gateway);
    let (mut stream, _) = send(&gateway, &client_body());
    let token = only_call(&gateway).token;
    stream.answer_call(token + 7, Some((200, &prefill_answer())));
    assert!(!stream.resumed());
    assert_eq!(in_flight(&gateway, PREFILL), 1);
    stream.answer_call(token, Some((200, &prefill_answer())));
    assert!(stream.resumed());
}

#[test]
fn a_request_routed_early_sends_its_prefill_leg_once_the_body_is_whole() {
    let mut routing = pd_routing(DisaggMode::Gateway, SplitPolicy::Always);
    // Hashing reads the first 2 KiB of the prompt: the decision comes at the first chunk.
    routing.settings.prefix.max_blocks = 32;
    let gateway = gateway_with(routing, true);
    // `model` first, as most clients write it, which early routing needs.
    let prompt = "a long story about the sea ".repeat(400);
    let body = format!(r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"{prompt}"}}],"stream":true}}"#);
    let chunks: Vec<&[u8]> = body.as_bytes().chunks(body.len().div_ceil(4)).collect();
    let mut stream = gateway.routers[0].stream();
    let flows = stream.request_flows("POST", "/v1/chat/completions", &[("content-type", "application/json")], &chunks);
    assert_eq!(flows, [Flow::Pause; 5], "headers and every chunk held");
    assert_eq!(gateway.envoy.stat("infergate.requests.routed_early"), 1, "routed before the body ended");
    assert!(stream.forwarded_body().is_empty(), "nothing went on before the prefill leg");
    let call = only_call(&gateway);
    assert_eq!(call.json()["messages"][0]["content"], prompt.as_str(), "the prefill leg has the whole prompt");
    stream.answer_call(call.token, Some((200, &prefill_answer())));
    let forwarded = String::from_utf8_lossy(stream.forwarded_body()).to_string();
    let params = params().to_string();
    assert_eq!(forwarded, format!("{{\"kv_transfer_params\":{params},{}", &body[1..]), "the client's bytes kept");
}

/// A gateway-mode pool under flow control, every pod saturated, and one split request
/// held in its gateway queue; `release` frees the pods, and the next tick releases it.
struct HeldSplit {
    gateway: Gateway,
    stream: Stream,
    routing: RoutingConfig,
}

impl HeldSplit {
    fn new() -> Self {
        let saturated = PodSignals { waiting: Some(9.0), running: Some(8.0), kv_cache_usage: Some(0.95), ..idle() };
        let mut routing = pd_routing(DisaggMode::Gateway, SplitPolicy::Always);
        routing.flow_control.enabled = true;
        routing.models[0].criticality = Criticality::Critical;
        let gateway = Gateway::with_router_config(1, &router_config_with(routing.clone(), true, false));
        let now = gateway.envoy.now_ms();
        let held = [saturated.clone(), saturated.clone(), saturated];
        assert_eq!(gateway.push_snapshot(&snapshot_with(1, now, &held, routing.clone())), 204);
        let (stream, flow) = send(&gateway, &client_body());
        assert_eq!(flow, Flow::Pause);
        assert!(stream.request_header(header::ENDPOINT).is_none(), "held");
        Self { gateway, stream, routing }
    }

    /// The pods have room: the tick releases the request and sends its prefill leg.
    fn release(&mut self) -> HttpCall {
        let now = self.gateway.envoy.now_ms();
        let idle = [idle(), idle(), idle()];
        assert_eq!(self.gateway.push_snapshot(&snapshot_with(2, now, &idle, self.routing.clone())), 204);
        self.gateway.envoy.advance_ms(50);
        assert!(!self.stream.resumed(), "released, it waits for its prefill leg");
        assert!(self.stream.request_header(header::ENDPOINT).is_some(), "routed");
        let call = only_call(&self.gateway);
        assert!(matches!(call.caller, Caller::Root(_)), "the tick sent it: {:?}", call.caller);
        call
    }
}

#[test]
fn a_split_request_released_from_the_gateway_queue_sends_its_prefill_leg_from_the_tick() {
    let mut held = HeldSplit::new();
    let call = held.release();
    assert_eq!(call.header(header::ENDPOINT), Some(PREFILL));
    assert_eq!(call.header("authorization"), Some("Bearer k"), "the client's headers, read from the tick");
    let sent = call.json();
    assert_eq!(
        (sent["max_tokens"].clone(), sent["kv_transfer_params"]["do_remote_decode"].clone()),
        (json!(1), json!(true))
    );
    assert_eq!(sent["messages"], client_body()["messages"]);
    assert_eq!(in_flight(&held.gateway, PREFILL), 1);
    // The answer comes to the root, which hands it to the stream.
    held.gateway.routers[0].answer_call(call.token, Some((200, &prefill_answer())));
    assert!(held.stream.resumed());
    let forwarded: Value = serde_json::from_slice(held.stream.forwarded_body()).unwrap_or(Value::Null);
    assert_eq!(forwarded["kv_transfer_params"], params(), "the decode leg carries the returned params");
    let length = held.stream.forwarded_body().len().to_string();
    assert_eq!(held.stream.request_header("content-length"), Some(length.as_str()));
    assert_eq!(in_flight(&held.gateway, PREFILL), 0, "released when the leg answered");
    assert_eq!(held.gateway.envoy.stat(stat::PD_PREFILL_OK), 1);
    assert!(decision(&mut held.stream).contains("pd_prefill=ok"));
    assert!(fallback_stats(&held.gateway).iter().all(|(_, n)| *n == 0));
}

#[test]
fn a_released_requests_failed_prefill_leg_serves_it_whole() {
    let mut held = HeldSplit::new();
    let call = held.release();
    held.gateway.routers[0].answer_call(call.token, Some((503, b"{}")));
    assert!(held.stream.resumed());
    let forwarded: Value = serde_json::from_slice(held.stream.forwarded_body()).unwrap_or(Value::Null);
    assert_eq!(forwarded, client_body(), "the client's body as it came");
    assert_eq!(in_flight(&held.gateway, PREFILL), 0);
    assert!(fallback_stats(&held.gateway).iter().all(|(why, n)| *n == i64::from(*why == "status")));
    assert!(decision(&mut held.stream).contains("pd_fallback=status"));
}

#[test]
fn a_released_request_whose_client_left_takes_its_leg_with_it() {
    let mut held = HeldSplit::new();
    let call = held.release();
    held.stream.end();
    assert_eq!(in_flight(&held.gateway, PREFILL), 0, "the stream's end released the prefill pod");
    // The answer that comes after finds the leg forgotten, and changes nothing.
    take_logs();
    held.gateway.routers[0].answer_call(call.token, Some((200, &prefill_answer())));
    let logs = take_logs();
    assert!(logs.iter().any(|l| l.contains("which no released request waits for")), "{logs:?}");
    assert_eq!(in_flight(&held.gateway, PREFILL), 0);
    assert_eq!(held.gateway.envoy.stat(stat::PD_PREFILL_OK), 0);
}

#[test]
fn a_torn_down_plugin_sends_requests_waiting_for_a_released_leg_on_whole() {
    let mut held = HeldSplit::new();
    held.release();
    held.gateway.routers[0].tear_down();
    assert!(held.stream.resumed(), "no answer will come to a torn-down root");
    let forwarded: Value = serde_json::from_slice(held.stream.forwarded_body()).unwrap_or(Value::Null);
    assert_eq!(forwarded, client_body());
    assert_eq!(in_flight(&held.gateway, PREFILL), 0);
    assert!(fallback_stats(&held.gateway).iter().all(|(why, n)| *n == i64::from(*why == "reset")));
}

/// A split request whose prefill leg worked and whose decode pod then answered `status`.
fn decode_leg_answers(gateway: &Gateway, status: u16) -> Stream {
    let (mut stream, _) = send(gateway, &client_body());
    stream.answer_call(only_call(gateway).token, Some((200, &prefill_answer())));
    let decode = stream.request_header(header::ENDPOINT).map(crate::test_support::first_endpoint).unwrap_or_default();
    stream.respond_headers(&decode, status, "application/json", false);
    stream
}

#[test]
fn a_failed_decode_leg_is_sent_whole_again_and_its_answer_replaces_the_failure() {
    let gateway = pd_gateway(DisaggMode::Gateway);
    let mut stream = decode_leg_answers(&gateway, 500);
    assert_eq!(stream.response_header(header::DECISION), None, "the failure is held");
    let calls = gateway.envoy.http_calls();
    assert_eq!(calls.len(), 2, "the prefill leg, then the whole request");
    let again = &calls[1];
    assert_eq!(again.json(), client_body(), "the client's body as it came");
    assert_eq!(again.header(header::ENDPOINT), stream.request_header(header::ENDPOINT), "to the decode pods");
    assert_eq!(again.cluster, "pool-llama");
    assert!(decode_pending(&gateway) > 1, "the whole prompt counts on the decode pod: {}", decode_pending(&gateway));
    // The failed answer's body is held too.
    let failure = br#"{"error":{"code":"kv_transfer_failed"}}"#;
    assert_eq!(stream.respond_chunk(failure, true), Flow::Pause);
    let whole = br#"data: {"choices":[{"delta":{"content":"hi"}}]}

data: [DONE]

"#;
    stream.answer_call(again.token, Some((200, whole)));
    let reply = stream.reply().cloned().expect("the whole answer replaces the failure");
    assert_eq!((reply.status, reply.body.as_slice()), (200, &whole[..]));
    assert!(
        reply.header(header::DECISION).is_some_and(|d| d.contains("pd_prefill=ok") && d.contains("pd_fallback=decode"))
    );
    assert_eq!(fallback_stats(&gateway).into_iter().filter(|(_, n)| *n > 0).collect::<Vec<_>>(), vec![("decode", 1)]);
    assert_eq!(gateway.envoy.stat(stat::PD_PREFILL_OK), 1);
    stream.end();
    assert_eq!(PodLoads::read(&*gateway.routers[0].host), PodLoads::default());
}

#[test]
fn a_failed_decode_leg_whose_whole_request_gets_no_answer_lets_the_failure_through() {
    let gateway = pd_gateway(DisaggMode::Gateway);
    let mut stream = decode_leg_answers(&gateway, 503);
    let token = gateway.envoy.http_calls()[1].token;
    stream.answer_call(token, None);
    assert!(stream.response_resumed());
    assert!(stream.reply().is_none());
}

#[test]
fn a_decode_legs_success_or_client_error_goes_on_as_it_came() {
    for status in [200, 400, 429] {
        let gateway = pd_gateway(DisaggMode::Gateway);
        let stream = decode_leg_answers(&gateway, status);
        assert!(stream.response_header(header::DECISION).is_some(), "{status}: passed on");
        assert_eq!(gateway.envoy.http_calls().len(), 1, "{status}: nothing sent again");
    }
    // Nor is a whole request's (or a sidecar's) failure sent again: no params went.
    let gateway = gateway_with(pd_routing(DisaggMode::Gateway, SplitPolicy::Never), false);
    let (mut stream, _) = send(&gateway, &client_body());
    assert_eq!(stream.respond_headers(PODS[1], 500, "application/json", false), Flow::Continue);
    let gateway = pd_gateway(DisaggMode::Sidecar);
    let (mut stream, _) = send(&gateway, &client_body());
    assert_eq!(stream.respond_headers(PODS[1], 500, "application/json", false), Flow::Continue);
}
