//! One request's ext_proc stream, as Envoy sends it with the request body
//! `FULL_DUPLEX_STREAMED` (the endpoint picker protocol's streaming mode): the
//! request headers, then the body in chunks, then the response headers. The picker
//! answers the request headers only once it has decided, then passes every body chunk
//! back; chunks that came before the decision wait for it. It decides as the filter
//! does, with core's body reader: early when the body names `model` first and the
//! hashed prompt bytes are in, else at its end. Refusals are OpenAI-style immediate
//! responses, before or after the decision. When the stream ends, for whatever
//! reason, the request's in-flight count is released.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, Metadata};
use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request;
use envoy_types::pb::envoy::service::ext_proc::v3::{HttpBody, HttpHeaders, ProcessingRequest, ProcessingResponse};
use envoy_types::pb::google::protobuf::value::Kind;
use infergate_core::ApiError;
use infergate_core::config::Criticality;
use infergate_core::endpoint::Endpoint;
use infergate_core::request::{ApiEndpoint, BodyEvent, BodyReader, InferenceRequest, classify, parse_request};
use infergate_core::wire::{epp, header};

use crate::picker::{Picker, Routed};
use crate::replies;

/// Where the request stands.
enum Phase {
    /// Nothing yet.
    Headers,
    /// Reading the body; nothing answered yet, every chunk held.
    Body { reader: BodyReader, held: Vec<HttpBody> },
    /// Routed: the request headers were answered, chunks pass as they come.
    Streaming { reader: BodyReader },
    /// Answered with an immediate response, or the body is complete.
    Done,
}

pub struct Exchange {
    picker: Arc<Picker>,
    phase: Phase,
    routed: Option<Routed>,
    criticality: Option<Criticality>,
    subset: Option<Vec<Endpoint>>,
    /// The client's copies of headers only the gateway may set, removed when routed.
    reserved: Vec<String>,
}

/// A header's value as text (Envoy sends `raw_value`; older builds `value`).
fn header_value<'a>(headers: &'a Option<HeaderMap>, name: &str) -> Option<&'a str> {
    let found = headers.as_ref()?.headers.iter().find(|h| h.key.eq_ignore_ascii_case(name))?;
    if found.raw_value.is_empty() { Some(found.value.as_str()) } else { std::str::from_utf8(&found.raw_value).ok() }
}

/// The proxy's subset hint: a list of `ip:port` (or one comma-separated string).
fn subset_hint(metadata: &Option<Metadata>) -> Option<Vec<Endpoint>> {
    let hint = metadata.as_ref()?.filter_metadata.get(epp::SUBSET_NAMESPACE)?.fields.get(epp::SUBSET_KEY)?;
    let parse = |text: &str| text.split(',').filter_map(|part| part.trim().parse().ok()).collect::<Vec<Endpoint>>();
    match hint.kind.as_ref()? {
        Kind::ListValue(list) => Some(
            list.values
                .iter()
                .filter_map(|v| match &v.kind {
                    Some(Kind::StringValue(text)) => Some(parse(text)),
                    _ => None,
                })
                .flatten()
                .collect(),
        ),
        Kind::StringValue(text) => Some(parse(text)),
        _ => None,
    }
}

/// The endpoint that served, as the proxy reports it in `envoy.lb` metadata.
fn served_by(metadata: &Option<Metadata>) -> Option<Endpoint> {
    let value = metadata.as_ref()?.filter_metadata.get(epp::LB_NAMESPACE)?.fields.get(epp::SERVED_KEY)?;
    match value.kind.as_ref()? {
        Kind::StringValue(text) => text.split(',').next()?.trim().parse().ok(),
        _ => None,
    }
}

impl Exchange {
    pub fn new(picker: Arc<Picker>) -> Self {
        picker.stats.streams_open.inc();
        Self { picker, phase: Phase::Headers, routed: None, criticality: None, subset: None, reserved: Vec::new() }
    }

    /// The answers to one message from the proxy, in the order to send them.
    pub fn on_message(&mut self, message: ProcessingRequest) -> Vec<ProcessingResponse> {
        match message.request {
            Some(Request::RequestHeaders(headers)) => {
                self.subset = subset_hint(&message.metadata_context);
                self.on_request_headers(&headers)
            }
            Some(Request::RequestBody(body)) => self.on_request_body(body),
            Some(Request::RequestTrailers(_)) => {
                // A body that ended with trailers instead of an end-of-stream chunk.
                let end = HttpBody { end_of_stream: true, ..Default::default() };
                let mut out = if matches!(self.phase, Phase::Done) { Vec::new() } else { self.on_request_body(end) };
                out.push(replies::trailers_unchanged(false));
                out
            }
            Some(Request::ResponseHeaders(_)) => {
                if let Some(routed) = self.routed.as_mut() {
                    self.picker.first_answer(routed, served_by(&message.metadata_context));
                }
                vec![replies::headers_unchanged(true)]
            }
            Some(Request::ResponseBody(_)) => vec![replies::response_body_unchanged()],
            Some(Request::ResponseTrailers(_)) => vec![replies::trailers_unchanged(true)],
            None => Vec::new(),
        }
    }

    fn refuse(&mut self, error: &ApiError) -> Vec<ProcessingResponse> {
        self.picker.stats.rejected.inc();
        self.phase = Phase::Done;
        // Refused after its decision: the pod will not answer it; release it now.
        if let Some(routed) = self.routed.take() {
            self.picker.finish(routed);
        }
        vec![replies::error(error)]
    }

    fn on_request_headers(&mut self, headers: &HttpHeaders) -> Vec<ProcessingResponse> {
        let map = &headers.headers;
        self.reserved = map
            .iter()
            .flat_map(|m| m.headers.iter())
            .map(|h| h.key.to_ascii_lowercase())
            .filter(|name| header::RESERVED_PREFIXES.iter().any(|prefix| name.starts_with(prefix)))
            .collect();
        if let Some(value) = header_value(map, header::CRITICALITY) {
            match Criticality::from_header(value) {
                Some(level) => self.criticality = Some(level),
                None => {
                    return self.refuse(&ApiError::invalid_request(
                        "invalid_criticality",
                        None,
                        "`x-infergate-criticality` must be `sheddable`, `standard` or `critical`.",
                    ));
                }
            }
        }
        let path = header_value(map, ":path").unwrap_or_default();
        match classify(header_value(map, ":method").unwrap_or_default(), path) {
            ApiEndpoint::ListModels => {
                self.phase = Phase::Done;
                vec![replies::model_list(self.picker.model_list())]
            }
            ApiEndpoint::Unknown => self.refuse(&ApiError::not_found_path(path)),
            ApiEndpoint::Inference => {
                let limit = self.picker.settings.max_body_bytes;
                let declared = header_value(map, "content-length").and_then(|v| v.trim().parse::<u64>().ok());
                if declared.is_some_and(|len| len > limit) {
                    return self.refuse(&ApiError::body_too_large(limit));
                }
                if headers.end_of_stream {
                    return self.refuse(&ApiError::invalid_request(
                        "invalid_body",
                        None,
                        "The request has no body; send a JSON object with a `model` field.",
                    ));
                }
                let early = declared.filter(|_| self.picker.settings.early_decision);
                let early = early.and_then(|len| usize::try_from(len).ok());
                let reader = BodyReader::new(&self.picker.prefix_settings(), limit, early);
                self.phase = Phase::Body { reader, held: Vec::new() };
                Vec::new()
            }
        }
    }

    fn on_request_body(&mut self, body: HttpBody) -> Vec<ProcessingResponse> {
        match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Body { mut reader, mut held } => {
                let event = reader.push(body.body.len(), Some(&body.body), body.end_of_stream);
                held.push(body);
                match event {
                    Ok(BodyEvent::Wait) => {
                        self.phase = Phase::Body { reader, held };
                        Vec::new()
                    }
                    Ok(BodyEvent::Decide { request, early }) => {
                        if early {
                            self.picker.stats.routed_early.inc();
                        }
                        self.decide(request, reader, held)
                    }
                    Ok(BodyEvent::ParseWhole) => {
                        self.picker.stats.full_parses.inc();
                        let whole: Vec<u8> = held.iter().flat_map(|chunk| chunk.body.iter().copied()).collect();
                        match parse_request(&whole, &self.picker.prefix_settings()) {
                            Ok(request) => self.decide(request, reader, held),
                            Err(error) => self.refuse(&error),
                        }
                    }
                    // Only a routed body passes; a reader that says so before is wrong.
                    Ok(BodyEvent::Pass | BodyEvent::PassUnverified) => {
                        self.refuse(&ApiError::invalid_request("invalid_body", None, "The body could not be read."))
                    }
                    Err(error) => self.refuse(&error),
                }
            }
            Phase::Streaming { mut reader } => {
                match reader.push(body.body.len(), Some(&body.body), body.end_of_stream) {
                    Ok(event) => {
                        if matches!(event, BodyEvent::PassUnverified) {
                            self.picker.stats.early_unverified.inc();
                        }
                        if !body.end_of_stream {
                            self.phase = Phase::Streaming { reader };
                        }
                        vec![replies::body_chunk(body.body, body.end_of_stream)]
                    }
                    Err(error) => {
                        self.picker.stats.early_refused.inc();
                        self.refuse(&error)
                    }
                }
            }
            phase @ (Phase::Headers | Phase::Done) => {
                self.phase = phase;
                Vec::new()
            }
        }
    }

    /// Routes the request: the request headers' answer, then the chunks held so far.
    fn decide(
        &mut self,
        mut request: InferenceRequest,
        reader: BodyReader,
        held: Vec<HttpBody>,
    ) -> Vec<ProcessingResponse> {
        request.criticality = self.criticality;
        let routed = match self.picker.route(&request, self.subset.as_deref()) {
            Ok(routed) => routed,
            Err(error) => return self.refuse(&error),
        };
        let mut out = vec![replies::routed_headers(&routed, &self.reserved)];
        self.routed = Some(routed);
        let ended = held.last().is_some_and(|chunk| chunk.end_of_stream);
        out.extend(held.into_iter().map(|chunk| replies::body_chunk(chunk.body, chunk.end_of_stream)));
        self.phase = if ended { Phase::Done } else { Phase::Streaming { reader } };
        out
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if let Some(routed) = self.routed.take() {
            self.picker.finish(routed);
        }
        self.picker.stats.streams_open.dec();
    }
}
