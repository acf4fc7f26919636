//! One ext_proc stream through the picker, message by message, as Envoy sends them
//! with the request body `FULL_DUPLEX_STREAMED`: what the picker answers, in which
//! order, and what it counts and releases.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue, Metadata};
use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    HttpBody, HttpHeaders, ProcessingRequest, ProcessingResponse, body_mutation,
};
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};
use infergate_core::config::InfergateConfig;
use infergate_core::wire::{epp, header};
use infergate_epp::exchange::Exchange;
use infergate_epp::picker::{Picker, PickerSettings};

const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

fn picker(early_decision: bool) -> Arc<Picker> {
    let text = include_str!("../../examples/infergate.yaml");
    let mut config = InfergateConfig::from_yaml_str(text, "examples/infergate.yaml").unwrap();
    config.routing.prefix.max_blocks = 16; // hashes the first 1 KiB of a prompt
    let settings = PickerSettings { max_body_bytes: 64 * 1024, early_decision, explain: false };
    Arc::new(Picker::new(config.routing_config(), settings, 7))
}

fn headers(method: &str, path: &str, extra: &[(&str, &str)], end_of_stream: bool) -> ProcessingRequest {
    let mut all = vec![(":method", method), (":path", path)];
    all.extend_from_slice(extra);
    let headers = all
        .iter()
        .map(|(k, v)| HeaderValue { key: k.to_string(), raw_value: v.as_bytes().to_vec(), ..Default::default() })
        .collect();
    ProcessingRequest {
        request: Some(Request::RequestHeaders(HttpHeaders {
            headers: Some(HeaderMap { headers }),
            end_of_stream,
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn body(bytes: &[u8], end_of_stream: bool) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Request::RequestBody(HttpBody { body: bytes.to_vec(), end_of_stream, ..Default::default() })),
        ..Default::default()
    }
}

fn chat(model: &str, words: usize) -> Vec<u8> {
    let prompt = "the quick brown fox ".repeat(words);
    format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"{prompt}"}}]}}"#).into_bytes()
}

/// Sends headers (with the body's length) and `body` in `pieces`; every answer.
fn send(exchange: &mut Exchange, bytes: &[u8], pieces: usize, extra: &[(&str, &str)]) -> Vec<Vec<ProcessingResponse>> {
    let length = bytes.len().to_string();
    let mut all = vec![("content-length", length.as_str())];
    all.extend_from_slice(extra);
    let mut answers = vec![exchange.on_message(headers("POST", "/v1/chat/completions", &all, false))];
    let chunks: Vec<&[u8]> = bytes.chunks(bytes.len().div_ceil(pieces)).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        answers.push(exchange.on_message(body(chunk, i + 1 == chunks.len())));
    }
    answers
}

fn set_header<'a>(answer: &'a ProcessingResponse, name: &str) -> Option<&'a str> {
    let Some(Response::RequestHeaders(headers)) = &answer.response else { return None };
    let mutation = headers.response.as_ref()?.header_mutation.as_ref()?;
    let found = mutation.set_headers.iter().find_map(|h| h.header.as_ref().filter(|h| h.key == name))?;
    std::str::from_utf8(&found.raw_value).ok()
}

fn passed_body(answers: &[ProcessingResponse]) -> Vec<u8> {
    answers
        .iter()
        .filter_map(|a| match &a.response {
            Some(Response::RequestBody(b)) => match b.response.as_ref()?.body_mutation.as_ref()?.mutation.as_ref()? {
                body_mutation::Mutation::StreamedResponse(streamed) => Some(streamed.body.clone()),
                _ => None,
            },
            _ => None,
        })
        .flatten()
        .collect()
}

fn immediate(answers: &[ProcessingResponse]) -> Option<(i32, serde_json::Value)> {
    answers.iter().find_map(|a| match &a.response {
        Some(Response::ImmediateResponse(r)) => {
            Some((r.status.as_ref()?.code, serde_json::from_slice(&r.body).unwrap_or_default()))
        }
        _ => None,
    })
}

#[test]
fn a_request_is_routed_with_the_headers_and_the_lb_metadata_then_its_body_passes() {
    let picker = picker(true);
    let mut exchange = Exchange::new(Arc::clone(&picker));
    let request = chat(MODEL, 3);
    let answers = send(&mut exchange, &request, 1, &[(header::ENDPOINT, "10.9.9.9:80"), ("x-infergate-x", "1")]);
    assert!(answers[0].is_empty(), "the request headers wait for the decision");
    let decided = &answers[1];
    let endpoints = set_header(&decided[0], header::ENDPOINT).unwrap().to_string();
    assert!(endpoints.starts_with("127.0.0.1:800"), "{endpoints}");
    assert_eq!(set_header(&decided[0], header::POOL), Some("llama"));
    assert_eq!(set_header(&decided[0], header::MODEL), Some(MODEL));
    let Some(Response::RequestHeaders(h)) = &decided[0].response else { panic!() };
    let common = h.response.as_ref().unwrap();
    assert!(common.clear_route_cache);
    assert_eq!(common.header_mutation.as_ref().unwrap().remove_headers, vec!["x-infergate-x".to_string()]);
    let lb = &decided[0].dynamic_metadata.as_ref().unwrap().fields[epp::LB_NAMESPACE];
    let Some(Kind::StructValue(lb)) = &lb.kind else { panic!() };
    assert_eq!(lb.fields[epp::DESTINATION_KEY].kind, Some(Kind::StringValue(endpoints.clone())));
    assert_eq!(passed_body(decided), request);
    let chosen = endpoints.split(',').next().unwrap().parse().unwrap();
    assert_eq!(picker.in_flight(chosen), 1);
    assert_eq!(picker.stats.decisions.get(), 1);
    drop(exchange);
    assert_eq!(picker.in_flight(chosen), 0, "released when the stream ends");
}

#[test]
fn a_long_body_naming_its_model_first_is_routed_early_and_streams_in_order() {
    // Answers: [headers, chunk 1..8]; the second 1 KiB chunk completes the hashed bytes.
    for (early, decided_at) in [(true, 2), (false, 8)] {
        let picker = picker(early);
        let mut exchange = Exchange::new(Arc::clone(&picker));
        let request = chat(MODEL, 400); // 8 KiB; hashing reads 1 KiB
        let answers = send(&mut exchange, &request, 8, &[]);
        let first = answers.iter().position(|a| !a.is_empty()).unwrap();
        assert_eq!(first, decided_at, "early={early}");
        assert!(set_header(&answers[first][0], header::ENDPOINT).is_some());
        let all: Vec<ProcessingResponse> = answers.into_iter().flatten().collect();
        assert_eq!(passed_body(&all), request, "every chunk passed back, in order");
        assert_eq!(picker.stats.routed_early.get(), u64::from(early));
    }
}

#[test]
fn bad_requests_get_openai_errors() {
    let picker = picker(true);
    let cases: [(&[u8], i32, &str); 3] = [
        (b"{not json", 400, "invalid_json"),
        (br#"{"messages":[]}"#, 400, "missing_required_parameter"),
        (br#"{"model":"nope"}"#, 404, "model_not_found"),
    ];
    for (bytes, status, code) in cases {
        let mut exchange = Exchange::new(Arc::clone(&picker));
        let answers: Vec<ProcessingResponse> = send(&mut exchange, bytes, 1, &[]).into_iter().flatten().collect();
        let (got, error) =
            immediate(&answers).unwrap_or_else(|| panic!("no refusal of {}", String::from_utf8_lossy(bytes)));
        assert_eq!((got, error["error"]["code"].as_str().unwrap_or_default()), (status, code));
        assert!(passed_body(&answers).is_empty(), "nothing reaches a pod");
    }
    let mut exchange = Exchange::new(Arc::clone(&picker));
    let too_big = exchange.on_message(headers("POST", "/v1/completions", &[("content-length", "999999")], false));
    assert_eq!(immediate(&too_big).unwrap().0, 413);
    let mut exchange = Exchange::new(Arc::clone(&picker));
    let unknown = exchange.on_message(headers("GET", "/v2/other", &[], true));
    assert_eq!(immediate(&unknown).unwrap().0, 404);
    let mut exchange = Exchange::new(Arc::clone(&picker));
    let (status, models) = immediate(&exchange.on_message(headers("GET", "/v1/models", &[], true))).unwrap();
    assert_eq!(status, 200);
    assert!(models["data"].as_array().is_some_and(|d| d.len() == 3), "{models}");
    assert_eq!(picker.stats.rejected.get(), 5);
}

#[test]
fn a_body_found_invalid_after_an_early_decision_is_refused_and_released() {
    let picker = picker(true);
    let mut exchange = Exchange::new(Arc::clone(&picker));
    let mut request = chat(MODEL, 400);
    request.truncate(request.len() - 1);
    request.extend_from_slice(br#","model":"other"}"#);
    let answers: Vec<ProcessingResponse> = send(&mut exchange, &request, 8, &[]).into_iter().flatten().collect();
    let chosen = set_header(&answers[0], header::ENDPOINT).unwrap().split(',').next().unwrap().parse().unwrap();
    let (status, error) = immediate(&answers).unwrap();
    assert_eq!(status, 400);
    assert!(error["error"]["message"].as_str().unwrap().contains("the key 'model' twice"), "{error}");
    assert!(passed_body(&answers).len() < request.len(), "the last chunk never passed");
    assert_eq!(picker.stats.early_refused.get(), 1);
    drop(exchange);
    assert_eq!(picker.in_flight(chosen), 0);
}

#[test]
fn the_subset_hint_limits_the_choice_and_an_empty_one_is_a_503() {
    let picker = picker(true);
    let hint = |list: &[&str]| Metadata {
        filter_metadata: [(
            epp::SUBSET_NAMESPACE.to_string(),
            Struct {
                fields: [(
                    epp::SUBSET_KEY.to_string(),
                    Value {
                        kind: Some(Kind::ListValue(ListValue {
                            values: list
                                .iter()
                                .map(|s| Value { kind: Some(Kind::StringValue(s.to_string())) })
                                .collect(),
                        })),
                    },
                )]
                .into_iter()
                .collect(),
            },
        )]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    for (subset, expected) in
        [(vec!["127.0.0.1:8002", "10.0.0.1:1"], Some("127.0.0.1:8002")), (vec!["10.0.0.1:1"], None)]
    {
        let mut exchange = Exchange::new(Arc::clone(&picker));
        let request = chat(MODEL, 3);
        let length = request.len().to_string();
        let mut first = headers("POST", "/v1/chat/completions", &[("content-length", &length)], false);
        first.metadata_context = Some(hint(&subset));
        assert!(exchange.on_message(first).is_empty());
        let answers = exchange.on_message(body(&request, true));
        match expected {
            Some(pod) => assert_eq!(set_header(&answers[0], header::ENDPOINT), Some(pod)),
            None => assert_eq!(immediate(&answers).unwrap().0, 503),
        }
    }
}

#[test]
fn a_split_request_names_its_prefill_pod_for_the_sidecar_and_releases_it() {
    let text = include_str!("../../examples/infergate.yaml");
    let mut config = InfergateConfig::from_yaml_str(text, "examples/infergate.yaml").unwrap();
    let pool = config.pools.iter_mut().find(|p| p.name == "llama").unwrap();
    let prefill: infergate_core::Endpoint = "127.0.0.1:8003".parse().unwrap();
    pool.disaggregation = Some(infergate_core::config::Disaggregation {
        mode: infergate_core::config::DisaggMode::Sidecar,
        split: infergate_core::config::SplitPolicy::Always,
        prefill_endpoints: vec![prefill],
        ..Default::default()
    });
    let settings = PickerSettings { max_body_bytes: 64 * 1024, early_decision: false, explain: true };
    let picker = Arc::new(Picker::new(config.routing_config(), settings, 7));
    let mut exchange = Exchange::new(Arc::clone(&picker));
    let answers = send(&mut exchange, &chat(MODEL, 400), 1, &[(header::PREFILLER_HOST_PORT, "10.6.6.6:80")]);
    let decided = answers.iter().flatten().find(|a| set_header(a, header::ENDPOINT).is_some()).unwrap();
    assert_eq!(
        set_header(decided, header::PREFILLER_HOST_PORT),
        Some("127.0.0.1:8003"),
        "the client's copy is replaced"
    );
    let decode: infergate_core::Endpoint =
        set_header(decided, header::ENDPOINT).unwrap().split(',').next().unwrap().parse().unwrap();
    assert_ne!(decode, prefill, "a prefill-only pod does not decode");
    assert!(set_header(decided, header::DECISION).unwrap().contains("pd=split reason=always"));
    assert_eq!(picker.in_flight(prefill), 1);
    drop(exchange);
    assert_eq!((picker.in_flight(prefill), picker.in_flight(decode)), (0, 0), "both released when the stream ends");
}

#[test]
fn without_the_sidecar_the_picker_serves_a_split_request_whole() {
    let text = include_str!("../../examples/infergate.yaml");
    let mut config = InfergateConfig::from_yaml_str(text, "examples/infergate.yaml").unwrap();
    let pool = config.pools.iter_mut().find(|p| p.name == "llama").unwrap();
    let prefill: infergate_core::Endpoint = "127.0.0.1:8003".parse().unwrap();
    pool.disaggregation = Some(infergate_core::config::Disaggregation {
        split: infergate_core::config::SplitPolicy::Always,
        prefill_endpoints: vec![prefill],
        ..Default::default()
    });
    let settings = PickerSettings { max_body_bytes: 64 * 1024, early_decision: false, explain: false };
    let picker = Arc::new(Picker::new(config.routing_config(), settings, 7));
    let mut exchange = Exchange::new(Arc::clone(&picker));
    let answers = send(&mut exchange, &chat(MODEL, 400), 1, &[]);
    let decided = answers.iter().flatten().find(|a| set_header(a, header::ENDPOINT).is_some()).unwrap();
    assert_eq!(set_header(decided, header::PREFILLER_HOST_PORT), None);
    assert_eq!(picker.in_flight(prefill), 0, "the prefill leg is released at once");
}
