//! Routing before the body ends: a body that names its model first is routed once its
//! hashed prompt bytes are in and streams on; what follows is still checked, and a
//! body that turns out invalid is answered by the gateway before it ends.

use infergate_core::config::RoutingConfig;
use infergate_core::wire::header;

use crate::host::events::Flow;
use crate::host::fake::Stream;
use crate::test_support::{Gateway, MODEL, idle, router_config_with, routing, snapshot_with};

/// The example's routing, hashing the first 2 KiB of a prompt (32 blocks of 64 bytes).
fn short_hash() -> RoutingConfig {
    let mut routing = routing();
    routing.settings.prefix.max_blocks = 32;
    routing
}

/// A chat body of about 16 KiB (eight times what hashing reads) with `model` first, as
/// curl and most HTTP clients write it, and `tail` spliced in before its closing brace.
fn model_first(model: &str, tail: &str) -> Vec<u8> {
    let prompt = "the quick brown fox jumps over the lazy dog ".repeat(380);
    format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"{prompt}"}}],"stream":true{tail}}}"#)
        .into_bytes()
}

fn gateway(early: bool) -> Gateway {
    let gateway = Gateway::with_router_config(1, &router_config_with(short_hash(), false, early));
    let now = gateway.envoy.now_ms();
    assert_eq!(gateway.push_snapshot(&snapshot_with(1, now, &[idle(), idle(), idle()], short_hash())), 204);
    gateway
}

/// Sends `body` in four chunks; returns the stream and each chunk's flow.
fn send(gateway: &Gateway, body: &[u8], headers: &[(&str, &str)]) -> (Stream, Vec<Flow>) {
    let mut stream = gateway.routers[0].stream();
    let chunks: Vec<&[u8]> = body.chunks(body.len().div_ceil(4)).collect();
    let flows = stream.request_flows("POST", "/v1/chat/completions", headers, &chunks);
    (stream, flows.into_iter().skip(1).collect())
}

#[test]
fn a_body_naming_its_model_first_is_routed_at_its_first_chunk_and_streams_on() {
    let gateway = gateway(true);
    let body = model_first(MODEL, "");
    let (whole, flows) = send(&gateway, &body, &[]);
    assert!(whole.request_header(header::ENDPOINT).is_some());
    assert_eq!(gateway.envoy.stat("infergate.requests.routed_early"), 1);
    assert_eq!(flows, [Flow::Continue; 4], "every chunk streams once routed");
    assert_eq!(whole.forwarded_body(), &body[..], "the whole body reached the pod, in order");
    assert!(whole.reply().is_none());
    assert_eq!(gateway.envoy.stat("infergate.requests.full_parses"), 0);
    assert_eq!(gateway.envoy.stat("infergate.requests.early.refused"), 0);
    assert_eq!(gateway.envoy.stat("infergate.requests.early.unverified"), 0);
}

#[test]
fn without_early_decision_or_a_declared_length_the_body_is_read_whole_first() {
    let body = model_first(MODEL, "");
    let (_, flows) = send(&gateway(false), &body, &[]);
    assert_eq!(flows, [Flow::Pause, Flow::Pause, Flow::Pause, Flow::Continue]);
    // No content-length (a chunked upload): the prompt's length is unknown until the end.
    let gateway = gateway(true);
    let (_, flows) = send(&gateway, &body, &[("content-length", "")]);
    assert_eq!(flows, [Flow::Pause, Flow::Pause, Flow::Pause, Flow::Continue]);
    assert_eq!(gateway.envoy.stat("infergate.requests.routed_early"), 0);
}

#[test]
fn a_body_naming_its_model_last_is_routed_at_its_end() {
    // The OpenAI Python SDK writes `messages` before `model`.
    let prompt = "the quick brown fox jumps over the lazy dog ".repeat(190);
    let body = format!(r#"{{"messages":[{{"role":"user","content":"{prompt}"}}],"model":"{MODEL}"}}"#).into_bytes();
    let gateway = gateway(true);
    let (stream, flows) = send(&gateway, &body, &[]);
    assert_eq!(flows, [Flow::Pause, Flow::Pause, Flow::Pause, Flow::Continue]);
    assert!(stream.request_header(header::ENDPOINT).is_some());
}

#[test]
fn a_body_that_turns_out_invalid_after_routing_is_answered_400_and_its_pod_released() {
    let cases = [
        (r#","model":"other""#, "the key 'model' twice"),
        (",", "not valid JSON: the error is within bytes"),
        (r#","max_completion_tokens":"many""#, "Invalid type for 'max_completion_tokens'"),
        (r#","max_tokens":-3"#, "Invalid 'max_tokens': integer below minimum value"),
    ];
    for (tail, words) in cases {
        let gateway = gateway(true);
        let body = model_first(MODEL, tail);
        let (mut stream, flows) = send(&gateway, &body, &[]);
        assert_eq!(&flows[..3], [Flow::Continue; 3], "{tail}");
        let reply = stream.reply().unwrap_or_else(|| panic!("no reply for {tail}"));
        assert_eq!(reply.status, 400, "{tail}");
        let message = reply.json()["error"]["message"].as_str().unwrap_or_default().to_string();
        assert!(message.contains(words), "{tail}: {message}");
        assert!(stream.forwarded_body().len() < body.len(), "the pod never got the whole body");
        assert_eq!(gateway.envoy.stat("infergate.requests.early.refused"), 1, "{tail}");
        assert_eq!(gateway.envoy.stat("infergate.requests.rejected"), 1, "{tail}");
        let pod = stream.request_header(header::ENDPOINT).map(crate::test_support::first_endpoint).unwrap_or_default();
        let pod = crate::test_support::pod(&pod);
        let in_flight = || crate::shared::pod_loads::PodLoads::read(&*gateway.routers[0].host).get(pod).in_flight;
        assert_eq!(in_flight(), 1, "counted while open");
        stream.end();
        assert_eq!(in_flight(), 0, "released at the end");
    }
}

#[test]
fn an_unknown_model_named_first_is_refused_before_the_body_ends() {
    let gateway = gateway(true);
    let body = model_first("no-such-model", "");
    let (stream, flows) = send(&gateway, &body, &[]);
    assert_eq!(flows, [Flow::Pause], "answered at the first chunk");
    assert_eq!(stream.reply().map(|r| r.status), Some(404));
    assert!(stream.forwarded_body().is_empty());
}

#[test]
fn a_shape_the_scanner_does_not_follow_is_left_to_the_engine_and_its_400_counted() {
    let gateway = gateway(true);
    // A later message as a list: valid JSON, one model, a shape the scanner leaves.
    let body = model_first(MODEL, r#","extra":1}"#.trim_end_matches('}'));
    let odd = String::from_utf8(body).unwrap().replacen(r#""}],"stream""#, r#""},["odd"]],"stream""#, 1);
    let (mut stream, flows) = send(&gateway, odd.as_bytes(), &[]);
    assert_eq!(flows, [Flow::Continue; 4]);
    assert!(stream.reply().is_none());
    assert_eq!(gateway.envoy.stat("infergate.requests.early.unverified"), 1);
    let pod = stream.request_header(header::ENDPOINT).map(crate::test_support::first_endpoint).unwrap_or_default();
    stream.respond(&pod, 400, "application/json", &[br#"{"error":{"message":"bad message"}}"#]);
    assert_eq!(gateway.envoy.stat("infergate.requests.early.engine_refused"), 1);
}

#[test]
fn under_flow_control_the_body_is_read_whole_so_the_request_can_be_held() {
    let gateway = gateway(true);
    let mut flow = short_hash();
    flow.flow_control.enabled = true;
    let now = gateway.envoy.now_ms();
    assert_eq!(gateway.push_snapshot(&snapshot_with(2, now, &[idle(), idle(), idle()], flow)), 204);
    let (_, flows) = send(&gateway, &model_first(MODEL, ""), &[]);
    assert_eq!(flows, [Flow::Pause, Flow::Pause, Flow::Pause, Flow::Continue]);
    assert_eq!(gateway.envoy.stat("infergate.requests.routed_early"), 0);
}
