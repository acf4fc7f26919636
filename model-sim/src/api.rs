//! The OpenAI-compatible endpoints of one simulated pod.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::engine::CHARS_PER_TOKEN;
use crate::fleet::Pod;

const DEFAULT_MAX_TOKENS: u64 = 16;

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    #[serde(default)]
    pub messages: Vec<Value>,
    #[serde(default)]
    pub prompt: Option<Value>,
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
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

impl CompletionRequest {
    /// Prompt tokens at 4 characters each, over what the chat template would see.
    pub fn prompt_tokens(&self) -> u64 {
        let chars = match &self.prompt {
            Some(Value::String(text)) => text.len(),
            Some(other) => other.to_string().len(),
            None => self.messages.iter().map(|m| m.to_string().len()).sum(),
        };
        (chars / CHARS_PER_TOKEN).max(1) as u64
    }

    pub fn output_tokens(&self) -> u64 {
        self.max_completion_tokens
            .or(self.max_tokens)
            .unwrap_or(DEFAULT_MAX_TOKENS)
            .max(1)
    }
}

fn unix_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub fn openai_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": code}});
    (status, Json(body)).into_response()
}

pub async fn chat_completions(State(pod): State<Arc<Pod>>, body: Bytes) -> Response {
    complete(pod, body, Flavor::Chat).await
}

pub async fn completions(State(pod): State<Arc<Pod>>, body: Bytes) -> Response {
    complete(pod, body, Flavor::Completion).await
}

pub async fn list_models(State(pod): State<Arc<Pod>>) -> Response {
    let data: Vec<Value> = pod
        .served_models()
        .iter()
        .map(|m| json!({"id": m, "object": "model", "created": unix_s(), "owned_by": "model-sim"}))
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

async fn complete(pod: Arc<Pod>, body: Bytes, flavor: Flavor) -> Response {
    let request: CompletionRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return openai_error(StatusCode::BAD_REQUEST, "invalid_json", &e.to_string()),
    };
    if !pod.serves(&request.model) {
        return openai_error(
            StatusCode::NOT_FOUND,
            "model_not_found",
            "this pod does not serve that model",
        );
    }
    if request.stream {
        stream(pod, request, flavor)
    } else {
        whole(pod, request, flavor).await
    }
}

async fn whole(pod: Arc<Pod>, request: CompletionRequest, flavor: Flavor) -> Response {
    let prompt_tokens = request.prompt_tokens();
    let output_tokens = request.output_tokens();
    let engine = pod.engine();
    let _admitted = engine.admit(prompt_tokens, output_tokens).await;
    tokio::time::sleep(engine.prefill_time(prompt_tokens)).await;
    for _ in 0..output_tokens {
        tokio::time::sleep(engine.decode_step_time()).await;
    }
    engine.generated(output_tokens);
    let text = generated_text(output_tokens);
    let usage = usage(prompt_tokens, output_tokens);
    let id = pod.next_id();
    let body = match flavor {
        Flavor::Chat => json!({
            "id": format!("chatcmpl-{id}"), "object": "chat.completion", "created": unix_s(), "model": request.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
            "usage": usage,
        }),
        Flavor::Completion => json!({
            "id": format!("cmpl-{id}"), "object": "text_completion", "created": unix_s(), "model": request.model,
            "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
            "usage": usage,
        }),
    };
    Json(body).into_response()
}

fn stream(pod: Arc<Pod>, request: CompletionRequest, flavor: Flavor) -> Response {
    let (tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, Infallible>>(16);
    tokio::spawn(async move {
        let mut tx = tx;
        let prompt_tokens = request.prompt_tokens();
        let output_tokens = request.output_tokens();
        let engine = pod.engine();
        let _admitted = engine.admit(prompt_tokens, output_tokens).await;
        tokio::time::sleep(engine.prefill_time(prompt_tokens)).await;
        let id = pod.next_id();
        for i in 0..output_tokens {
            if i > 0 {
                tokio::time::sleep(engine.decode_step_time()).await;
            }
            let last = i + 1 == output_tokens;
            let chunk = chunk(flavor, id, &request.model, "tok ", last);
            if send(&mut tx, &chunk).await.is_err() {
                return; // The client went away; free the slot.
            }
            engine.generated(1);
        }
        if request
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
        {
            let mut usage_chunk = chunk(flavor, id, &request.model, "", false);
            usage_chunk["choices"] = json!([]);
            usage_chunk["usage"] = usage(prompt_tokens, output_tokens);
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
    tx: &mut futures::channel::mpsc::Sender<Result<Bytes, Infallible>>,
    event: &Value,
) -> Result<(), futures::channel::mpsc::SendError> {
    futures::SinkExt::send(tx, Ok(Bytes::from(format!("data: {event}\n\n")))).await
}

fn chunk(flavor: Flavor, id: u64, model: &str, text: &str, last: bool) -> Value {
    let finish = if last { json!("length") } else { Value::Null };
    match flavor {
        Flavor::Chat => json!({
            "id": format!("chatcmpl-{id}"), "object": "chat.completion.chunk", "created": unix_s(), "model": model,
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
        }),
        Flavor::Completion => json!({
            "id": format!("cmpl-{id}"), "object": "text_completion", "created": unix_s(), "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        }),
    }
}

fn usage(prompt_tokens: u64, output_tokens: u64) -> Value {
    json!({"prompt_tokens": prompt_tokens, "completion_tokens": output_tokens, "total_tokens": prompt_tokens + output_tokens})
}

fn generated_text(tokens: u64) -> String {
    "tok ".repeat(tokens as usize)
}
