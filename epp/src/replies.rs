//! The ext_proc messages the picker answers with: the request headers with the routing
//! headers set (and `envoy.lb` metadata, as the endpoint picker protocol asks), the
//! body chunks passed back unchanged, an empty answer to a phase it only watches, and
//! an OpenAI-style error instead of the request.

use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    BodyMutation, BodyResponse, CommonResponse, HeaderMutation, HeadersResponse, ImmediateResponse, ProcessingResponse,
    StreamedBodyResponse, TrailersResponse, body_mutation,
};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use infergate_core::ApiError;
use infergate_core::flow::Refusal;
use infergate_core::wire::{epp, header};

use crate::picker::Routed;

fn set(name: &str, value: &str) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue { key: name.to_string(), raw_value: value.as_bytes().to_vec(), ..Default::default() }),
        ..Default::default()
    }
}

fn string(text: &str) -> Value {
    Value { kind: Some(Kind::StringValue(text.to_string())) }
}

/// The request headers' answer: the routing headers, a cleared route cache (the pool's
/// route matches on them) and the picked endpoints in `envoy.lb` metadata.
/// `reserved`: the client's copies of gateway-only headers, removed unless set here.
pub fn routed_headers(routed: &Routed, reserved: &[String]) -> ProcessingResponse {
    let mut set_headers = vec![
        set(header::POOL, &routed.pool),
        set(header::MODEL, &routed.model),
        set(header::ENDPOINT, &routed.endpoints),
    ];
    if let Some(explanation) = &routed.explanation {
        set_headers.push(set(header::DECISION, explanation));
    }
    if let Some(prefiller) = routed.prefiller {
        set_headers.push(set(header::PREFILLER_HOST_PORT, &prefiller.to_string()));
    }
    let remove_headers = reserved
        .iter()
        .filter(|name| !set_headers.iter().any(|set| set.header.as_ref().is_some_and(|h| &h.key == *name)));
    let remove_headers = remove_headers.cloned().collect();
    let common = CommonResponse {
        header_mutation: Some(HeaderMutation { set_headers, remove_headers }),
        clear_route_cache: true,
        ..Default::default()
    };
    let lb = Struct { fields: [(epp::DESTINATION_KEY.to_string(), string(&routed.endpoints))].into_iter().collect() };
    let metadata = Struct {
        fields: [(epp::LB_NAMESPACE.to_string(), Value { kind: Some(Kind::StructValue(lb)) })].into_iter().collect(),
    };
    ProcessingResponse {
        response: Some(Response::RequestHeaders(HeadersResponse { response: Some(common) })),
        dynamic_metadata: Some(metadata),
        ..Default::default()
    }
}

/// A request body chunk passed on unchanged (the body is streamed both ways).
pub fn body_chunk(body: Vec<u8>, end_of_stream: bool) -> ProcessingResponse {
    let mutation =
        body_mutation::Mutation::StreamedResponse(StreamedBodyResponse { body, end_of_stream, ..Default::default() });
    let common =
        CommonResponse { body_mutation: Some(BodyMutation { mutation: Some(mutation) }), ..Default::default() };
    ProcessingResponse {
        response: Some(Response::RequestBody(BodyResponse { response: Some(common) })),
        ..Default::default()
    }
}

/// Headers the picker only watched (the request's, when nothing is to be set; the
/// response's).
pub fn headers_unchanged(response: bool) -> ProcessingResponse {
    let answer = HeadersResponse { response: Some(CommonResponse::default()) };
    let response = if response { Response::ResponseHeaders(answer) } else { Response::RequestHeaders(answer) };
    ProcessingResponse { response: Some(response), ..Default::default() }
}

pub fn trailers_unchanged(response: bool) -> ProcessingResponse {
    let answer = TrailersResponse::default();
    let response = if response { Response::ResponseTrailers(answer) } else { Response::RequestTrailers(answer) };
    ProcessingResponse { response: Some(response), ..Default::default() }
}

/// The proxy answers the client with `body` and `status` instead of the request.
fn immediate(status: u16, headers: Vec<HeaderValueOption>, body: Vec<u8>, details: &str) -> ProcessingResponse {
    let answer = ImmediateResponse {
        status: Some(HttpStatus { code: i32::from(status) }),
        headers: Some(HeaderMutation { set_headers: headers, ..Default::default() }),
        body,
        details: details.to_string(),
        ..Default::default()
    };
    ProcessingResponse { response: Some(Response::ImmediateResponse(answer)), ..Default::default() }
}

/// An OpenAI-style error, with `Retry-After` and the queue reason when it has them.
pub fn error(error: &ApiError) -> ProcessingResponse {
    let mut headers = vec![set("content-type", "application/json")];
    if let Some(seconds) = error.retry_after_s {
        headers.push(set("retry-after", &seconds.to_string()));
    }
    if let Some(reason) = Refusal::reason_of(error) {
        headers.push(set(header::QUEUE_REASON, reason));
    }
    immediate(error.status, headers, error.body(), &format!("infergate_{}", error.code))
}

/// `GET /v1/models`, answered by the picker from its config.
pub fn model_list(body: Vec<u8>) -> ProcessingResponse {
    immediate(200, vec![set("content-type", "application/json")], body, "infergate_model_list")
}

/// A response body chunk, if the proxy sends them, passed on unchanged.
pub fn response_body_unchanged() -> ProcessingResponse {
    ProcessingResponse {
        response: Some(Response::ResponseBody(BodyResponse { response: Some(CommonResponse::default()) })),
        ..Default::default()
    }
}
