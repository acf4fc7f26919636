//! The KV handover between the two legs of a split request, on each side: a prefill
//! pod holds the prompt's KV and names it in its answer; a decode pod claims it from
//! there over HTTP (which fails if it is unknown, already taken or expired, as a real
//! transfer would), then waits for the bytes on its link.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::api::{openai_error, openai_error_for};
use super::http_client::post_json;
use super::kv_transfer::{KV_TRANSFER_PARAMS, PrefillSource, RemoteKv, prefill_answer};
use super::pod::Pod;

/// Where a pod hands over a held prompt's KV, once.
pub const CLAIM_PATH: &str = "/internal/kv/claim";
const CLAIM_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest transfer a link is booked for, whatever the flags say.
const MAX_TRANSFER: Duration = Duration::from_secs(24 * 3600);

/// Holds a prefilled prompt's KV for its decode pod; returns the `kv_transfer_params`
/// the prefill leg answers with.
pub fn hold_for_decode(pod: &Pod, request_id: &str, prompt_tokens: u32) -> Value {
    pod.kv_registry().hold(request_id.to_string(), prompt_tokens, Instant::now());
    pod.count_pd(|c| c.prefill_legs += 1);
    let host = pod.kv_host();
    let engine_id = pod.address().to_string();
    let source = PrefillSource { engine_id: &engine_id, host: &host, port: pod.address().port() };
    prefill_answer(&source, request_id, &pod.block_ids(prompt_tokens))
}

/// Fetches a decode leg's prompt KV: claims it from the prefill pod, then moves the
/// tokens this pod does not have cached over its link, behind the transfers already
/// on it. Returns the engine seconds this took, or the error to answer.
pub async fn receive(
    pod: &Pod,
    remote: &RemoteKv,
    prompt: &[u8],
    adapter: Option<String>,
    prompt_tokens: u32,
) -> Result<f64, Response> {
    let started = Instant::now();
    let claimed = match claim(remote).await {
        Ok(claimed) => claimed,
        Err(reason) => {
            pod.count_pd(|c| c.failed_transfers += 1);
            tracing::warn!(pod = %pod.address(), prefill_pod = %remote.authority(), request = %remote.request_id, %reason, "KV transfer failed");
            let message = format!("the prompt's KV could not be transferred from {}: {reason}", remote.authority());
            return Err(openai_error(StatusCode::INTERNAL_SERVER_ERROR, "kv_transfer_failed", &message));
        }
    };
    if claimed != prompt_tokens {
        pod.count_pd(|c| c.failed_transfers += 1);
        let message = format!(
            "the prefill pod computed a prompt of {claimed} tokens for {}, this request's has {prompt_tokens}: the decode leg must carry the prefill leg's prompt",
            remote.request_id
        );
        return Err(openai_error_for(
            StatusCode::BAD_REQUEST,
            "kv_transfer_mismatch",
            &message,
            Some(KV_TRANSFER_PARAMS),
        ));
    }
    let cached = pod.driver().cached_prompt_tokens(prompt.to_vec(), adapter).await;
    let tokens = u64::from(prompt_tokens.saturating_sub(cached));
    let bytes = tokens.saturating_mul(pod.pd().kv_bytes_per_token);
    let seconds = pod.pd().transfer_seconds(tokens) * pod.time_scale();
    let duration = Duration::try_from_secs_f64(seconds).unwrap_or(MAX_TRANSFER).min(MAX_TRANSFER);
    let booked = Instant::now();
    let end = pod.kv_link().book(duration, booked);
    tokio::time::sleep_until(end).await;
    pod.count_pd(|c| {
        c.decode_legs += 1;
        c.transfer_bytes.observe(bytes as f64);
        c.transfer_seconds.observe((end - booked).as_secs_f64());
    });
    Ok(started.elapsed().as_secs_f64() / pod.time_scale())
}

/// Takes the held KV of `remote` from its prefill pod: the prompt's token count.
async fn claim(remote: &RemoteKv) -> Result<u32, String> {
    let body = json!({"remote_request_id": remote.request_id}).to_string();
    let reply = post_json(&remote.authority(), CLAIM_PATH, body.as_bytes(), CLAIM_TIMEOUT).await?;
    match reply.status {
        200 => serde_json::from_slice::<Value>(&reply.body)
            .ok()
            .and_then(|answer| answer.get("prompt_tokens").and_then(Value::as_u64))
            .and_then(|tokens| u32::try_from(tokens).ok())
            .ok_or_else(|| "the prefill pod's claim answer has no prompt_tokens".to_string()),
        404 => Err(format!("it holds no KV for {} (unknown, already transferred or expired)", remote.request_id)),
        status => Err(format!("its claim endpoint answered {status}: {}", String::from_utf8_lossy(&reply.body))),
    }
}

#[derive(Debug, Deserialize)]
struct ClaimRequest {
    remote_request_id: String,
}

/// `POST /internal/kv/claim` with `{"remote_request_id": ...}`: hands over a held
/// prompt's KV, once. 200 `{"remote_request_id", "remote_engine_id", "prompt_tokens"}`,
/// or 404 when there is none.
pub async fn claim_endpoint(State(pod): State<Arc<Pod>>, body: Bytes) -> Response {
    let request: ClaimRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return openai_error_for(StatusCode::BAD_REQUEST, "invalid_json", &e.to_string(), None),
    };
    match pod.kv_registry().claim(&request.remote_request_id, Instant::now()) {
        Some(prompt_tokens) => Json(json!({
            "remote_request_id": request.remote_request_id,
            "remote_engine_id": pod.address().to_string(),
            "prompt_tokens": prompt_tokens,
        }))
        .into_response(),
        None => {
            let message =
                format!("no KV is held for {}: unknown, already transferred or expired", request.remote_request_id);
            openai_error(StatusCode::NOT_FOUND, "kv_not_found", &message)
        }
    }
}
