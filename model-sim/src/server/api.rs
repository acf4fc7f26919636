//! The OpenAI-compatible endpoints of one simulated pod, either leg of a split request
//! included.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::handover;
use super::kv_transfer::{KV_TRANSFER_PARAMS, Leg};
use super::pod::Pod;
use super::sidecar::{self, PREFILLER_HEADER};
use crate::engine::EngineEvent;

const DEFAULT_MAX_TOKENS: u32 = 16;

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    #[serde(default)]
    pub messages: Vec<Value>,
    #[serde(default)]
    pub tools: Vec<Value>,
    #[serde(default)]
    pub prompt: Option<Value>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// vLLM's prefill/decode handover: which leg of a split request this is.
    #[serde(default)]
    pub kv_transfer_params: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Chat,
    Completion,
}

impl Flavor {
    pub fn path(self) -> &'static str {
        match self {
            Flavor::Chat => "/v1/chat/completions",
            Flavor::Completion => "/v1/completions",
        }
    }
}

impl CompletionRequest {
    /// The text a chat template would feed the model: each message as a role tag and
    /// its content (text parts joined), then the tool definitions.
    pub fn prompt_text(&self) -> Vec<u8> {
        let mut text = String::new();
        match &self.prompt {
            Some(Value::String(prompt)) => text.push_str(prompt),
            Some(other) => text.push_str(&other.to_string()),
            None => {
                for message in &self.messages {
                    text.push_str("<|");
                    text.push_str(message["role"].as_str().unwrap_or("user"));
                    text.push_str("|>");
                    match &message["content"] {
                        Value::String(content) => text.push_str(content),
                        Value::Array(parts) => {
                            for part in parts {
                                text.push_str(part["text"].as_str().unwrap_or_default());
                            }
                        }
                        _ => {}
                    }
                }
                for tool in &self.tools {
                    text.push_str(&tool.to_string());
                }
            }
        }
        text.into_bytes()
    }

    pub fn output_tokens(&self) -> u32 {
        self.max_completion_tokens.or(self.max_tokens).unwrap_or(DEFAULT_MAX_TOKENS).max(1)
    }
}

fn unix_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

pub fn openai_error(status: StatusCode, code: &str, message: &str) -> Response {
    openai_error_for(status, code, message, None)
}

/// An error in OpenAI's shape that names the request field at fault.
pub fn openai_error_for(status: StatusCode, code: &str, message: &str, param: Option<&str>) -> Response {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}});
    (status, Json(body)).into_response()
}

/// Every completion answer carries the xxHash64 of the request body the pod received,
/// in hex, so that a test can tell the gateway passed it on byte for byte.
pub const BODY_DIGEST_HEADER: &str = "x-sim-body-xxh64";

pub async fn chat_completions(State(pod): State<Arc<Pod>>, headers: HeaderMap, body: Bytes) -> Response {
    with_body_digest(&body.clone(), serve(pod, &headers, body, Flavor::Chat).await)
}

pub async fn completions(State(pod): State<Arc<Pod>>, headers: HeaderMap, body: Bytes) -> Response {
    with_body_digest(&body.clone(), serve(pod, &headers, body, Flavor::Completion).await)
}

/// With the sidecar on and a prefill pod named, the prefill leg runs there first and
/// this pod serves the decode leg; otherwise the request as it came.
async fn serve(pod: Arc<Pod>, headers: &HeaderMap, body: Bytes, flavor: Flavor) -> Response {
    let prefiller = headers
        .get(PREFILLER_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|value| pod.pd().sidecar && !value.is_empty());
    let body = match prefiller {
        Some(prefiller) => match sidecar::prefill_remotely(prefiller, flavor.path(), &body).await {
            Ok(decode) => decode,
            Err(response) => return response,
        },
        None => body,
    };
    complete(pod, body, flavor).await
}

fn with_body_digest(body: &[u8], mut response: Response) -> Response {
    let digest = format!("{:016x}", xxhash_rust::xxh64::xxh64(body, 0));
    if let Ok(value) = axum::http::HeaderValue::from_str(&digest) {
        response.headers_mut().insert(BODY_DIGEST_HEADER, value);
    }
    response
}

/// vLLM's render endpoints (`/v1/chat/completions/render`, `/v1/completions/render`;
/// vLLM serves them with `--enable-scale-out`): the request's prompt as token ids
/// ([`super::tokens`]), without running it. vllm-router's `kv_aware` asks every pod
/// for them to match a prompt against the pods' KV events.
pub async fn render(body: Bytes) -> Response {
    let request: CompletionRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return openai_error(StatusCode::BAD_REQUEST, "invalid_json", &e.to_string()),
    };
    Json(json!({"token_ids": super::tokens::token_ids(&request.prompt_text())})).into_response()
}

pub async fn list_models(State(pod): State<Arc<Pod>>) -> Response {
    let data: Vec<Value> = pod
        .served_models()
        .iter()
        .map(|(id, parent)| {
            json!({"id": id, "object": "model", "created": unix_s(), "owned_by": "model-sim", "parent": parent})
        })
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

async fn complete(pod: Arc<Pod>, body: Bytes, flavor: Flavor) -> Response {
    let request: CompletionRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return openai_error(StatusCode::BAD_REQUEST, "invalid_json", &e.to_string()),
    };
    if !pod.serves(&request.model) {
        return openai_error(StatusCode::NOT_FOUND, "model_not_found", "this pod does not serve that model");
    }
    let leg = match leg(&pod, &request) {
        Ok(leg) => leg,
        Err(message) => {
            return openai_error_for(
                StatusCode::BAD_REQUEST,
                "invalid_kv_transfer_params",
                &message,
                Some(KV_TRANSFER_PARAMS),
            );
        }
    };
    let faults = pod.faults();
    if faults.hang {
        std::future::pending::<()>().await;
    }
    if faults.added_latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(faults.added_latency_ms)).await;
    }
    if pod.roll_error(faults.error_rate) {
        let status = StatusCode::from_u16(faults.error_status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        return openai_error(status, "injected_fault", "model-sim injected this error");
    }
    let prompt = request.prompt_text();
    // Like vLLM, refuse what can never fit, rather than queue it forever.
    let prompt_tokens = prompt.len().div_ceil(crate::engine::CHARS_PER_TOKEN) as u64;
    let wanted = prompt_tokens + u64::from(request.output_tokens());
    if wanted > pod.max_context_tokens() {
        let message = format!(
            "This model's maximum context length is {} tokens. However, you requested {wanted} tokens ({prompt_tokens} in the messages, {} in the completion). Please reduce the length of the messages or completion.",
            pod.max_context_tokens(),
            request.output_tokens()
        );
        return openai_error(StatusCode::BAD_REQUEST, "context_length_exceeded", &message);
    }
    let adapter = pod.adapter_for(&request.model);
    let events = match &leg {
        Leg::Decode(remote) => {
            let tokens = u32::try_from(prompt_tokens.max(1)).unwrap_or(u32::MAX);
            let waited = match handover::receive(&pod, remote, &prompt, adapter.clone(), tokens).await {
                Ok(waited) => waited,
                Err(response) => return response,
            };
            pod.driver().submit_transferred(prompt, request.output_tokens(), adapter, waited)
        }
        Leg::Whole | Leg::Prefill => pod.driver().submit(prompt, request.output_tokens(), adapter),
    };
    let prefill_leg = leg == Leg::Prefill;
    if request.stream {
        stream(pod, request, flavor, events)
    } else {
        whole(pod, request, flavor, events, prefill_leg).await
    }
}

/// Which leg of a split request this is, if this pod's role serves it.
fn leg(pod: &Pod, request: &CompletionRequest) -> Result<Leg, String> {
    let leg = Leg::of(request.kv_transfer_params.as_ref())?;
    pod.pd().role.admit(&leg)?;
    if leg == Leg::Prefill && request.stream {
        return Err(
            "a prefill leg (do_remote_decode) is answered whole, with its kv_transfer_params: send stream false"
                .to_string(),
        );
    }
    Ok(leg)
}

async fn whole(
    pod: Arc<Pod>,
    request: CompletionRequest,
    flavor: Flavor,
    mut events: mpsc::UnboundedReceiver<EngineEvent>,
    prefill_leg: bool,
) -> Response {
    let output_tokens = request.output_tokens();
    loop {
        match events.recv().await {
            Some(EngineEvent::Finished { .. }) => break,
            Some(_) => {}
            None => {
                return openai_error(StatusCode::INTERNAL_SERVER_ERROR, "engine_stopped", "the engine stopped");
            }
        }
    }
    let prompt_tokens = prompt_tokens(&request);
    let text = "tok ".repeat(output_tokens as usize);
    let usage = usage(prompt_tokens, output_tokens);
    let id = pod.next_id();
    let mut body = match flavor {
        Flavor::Chat => json!({
            "id": format!("chatcmpl-{id:x}"), "object": "chat.completion", "created": unix_s(), "model": request.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
            "usage": usage,
        }),
        Flavor::Completion => json!({
            "id": format!("cmpl-{id:x}"), "object": "text_completion", "created": unix_s(), "model": request.model,
            "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
            "usage": usage,
        }),
    };
    if prefill_leg {
        // The completion id names the held KV, as vLLM's request id does.
        let request_id = body["id"].as_str().unwrap_or_default().to_string();
        body[KV_TRANSFER_PARAMS] = handover::hold_for_decode(&pod, &request_id, prompt_tokens);
    }
    Json(body).into_response()
}

fn prompt_tokens(request: &CompletionRequest) -> u32 {
    let chars = request.prompt_text().len();
    u32::try_from(chars.div_ceil(crate::engine::CHARS_PER_TOKEN)).unwrap_or(u32::MAX).max(1)
}

fn stream(
    pod: Arc<Pod>,
    request: CompletionRequest,
    flavor: Flavor,
    mut events: mpsc::UnboundedReceiver<EngineEvent>,
) -> Response {
    let (tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        let mut tx = tx;
        let id = pod.next_id();
        let output_tokens = request.output_tokens();
        let mut sent = 0u32;
        while let Some(event) = events.recv().await {
            if let EngineEvent::Finished { .. } = event {
                break;
            }
            if pod.is_killed() {
                // As a crashed server: the connection is reset mid-answer.
                let _ = futures::SinkExt::send(&mut tx, Err(std::io::Error::other("pod killed"))).await;
                return;
            }
            sent += 1;
            let chunk = chunk(flavor, id, &request.model, "tok ", sent >= output_tokens);
            if send(&mut tx, &chunk).await.is_err() {
                return; // The client went away; the engine finishes the request anyway.
            }
        }
        if request.stream_options.as_ref().is_some_and(|o| o.include_usage) {
            let mut usage_chunk = chunk(flavor, id, &request.model, "", false);
            usage_chunk["choices"] = json!([]);
            usage_chunk["usage"] = usage(prompt_tokens(&request), output_tokens);
            let _ = send(&mut tx, &usage_chunk).await;
        }
        let _ = futures::SinkExt::send(&mut tx, Ok(Bytes::from_static(b"data: [DONE]\n\n"))).await;
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(rx))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn send(
    tx: &mut futures::channel::mpsc::Sender<Result<Bytes, std::io::Error>>,
    event: &Value,
) -> Result<(), futures::channel::mpsc::SendError> {
    futures::SinkExt::send(tx, Ok(Bytes::from(format!("data: {event}\n\n")))).await
}

fn chunk(flavor: Flavor, id: u64, model: &str, text: &str, last: bool) -> Value {
    let finish = if last { json!("length") } else { Value::Null };
    match flavor {
        Flavor::Chat => json!({
            "id": format!("chatcmpl-{id:x}"), "object": "chat.completion.chunk", "created": unix_s(), "model": model,
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
        }),
        Flavor::Completion => json!({
            "id": format!("cmpl-{id:x}"), "object": "text_completion", "created": unix_s(), "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        }),
    }
}

fn usage(prompt_tokens: u32, output_tokens: u32) -> Value {
    json!({"prompt_tokens": prompt_tokens, "completion_tokens": output_tokens, "total_tokens": prompt_tokens + output_tokens})
}
