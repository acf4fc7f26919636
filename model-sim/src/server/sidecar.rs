//! llm-d's routing sidecar, emulated in front of a pod (`--pd-sidecar`): a request
//! that names a prefill pod in `x-prefiller-host-port` has its prefill leg sent there
//! first, then is served here as the decode leg with the `kv_transfer_params` the
//! prefill pod answered. A failed prefill leg's answer is passed back to the client.

use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::api::openai_error;
use super::http_client::{Reply, post_json};
use super::kv_transfer::{KV_TRANSFER_PARAMS, prefill_request};

/// The prefill pod, `host:port`, that llm-d's router chose (llm-d's header name).
pub use infergate_core::wire::header::PREFILLER_HOST_PORT as PREFILLER_HEADER;
/// A long prompt on a loaded prefill pod can take minutes.
const PREFILL_TIMEOUT: Duration = Duration::from_secs(600);

/// The prefill leg of `request` as llm-d's sidecar sends it: one token, not
/// streamed, asking the prefill pod to keep the KV for a remote decode.
pub fn prefill_body(request: &Map<String, Value>) -> Map<String, Value> {
    let mut body = request.clone();
    for field in ["max_tokens", "max_completion_tokens", "min_tokens"] {
        body.insert(field.to_string(), json!(1));
    }
    body.insert("stream".to_string(), json!(false));
    body.remove("stream_options");
    body.insert(KV_TRANSFER_PARAMS.to_string(), prefill_request());
    body
}

/// Runs the prefill leg of `body` on `prefiller` and returns the decode leg's body: the
/// same request with the `kv_transfer_params` the prefill pod answered (none if it
/// answered none, as the sidecar passes them on). A body that is not a JSON object is
/// returned as it is, for the pod's own error.
pub async fn prefill_remotely(prefiller: &str, path: &str, body: &Bytes) -> Result<Bytes, Response> {
    let Ok(Value::Object(request)) = serde_json::from_slice::<Value>(body) else {
        return Ok(body.clone());
    };
    let prefill = Value::Object(prefill_body(&request)).to_string();
    let failed = |reason: String| {
        tracing::warn!(%prefiller, %reason, "the sidecar's prefill leg failed");
        openai_error(
            StatusCode::BAD_GATEWAY,
            "prefill_failed",
            &format!("the prefill leg on {prefiller} failed: {reason}"),
        )
    };
    let reply = post_json(prefiller, path, prefill.as_bytes(), PREFILL_TIMEOUT).await.map_err(failed)?;
    if !(200..300).contains(&reply.status) {
        return Err(pass_back(reply));
    }
    let answer: Value =
        serde_json::from_slice(&reply.body).map_err(|e| failed(format!("its answer is not JSON: {e}")))?;
    let mut decode = request;
    decode.insert(KV_TRANSFER_PARAMS.to_string(), answer.get(KV_TRANSFER_PARAMS).cloned().unwrap_or(Value::Null));
    Ok(Bytes::from(Value::Object(decode).to_string()))
}

/// The prefill pod's error answer, status and body, as the sidecar relays it.
fn pass_back(reply: Reply) -> Response {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = reply.content_type.unwrap_or_else(|| "application/json".to_string());
    (status, [(header::CONTENT_TYPE, content_type)], reply.body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefill_leg_asks_for_one_unstreamed_token_and_a_remote_decode() {
        let request = json!({
            "model": "m", "messages": [], "max_tokens": 200, "min_tokens": 5, "stream": true,
            "stream_options": {"include_usage": true}, "temperature": 0.2,
        });
        let body = Value::Object(prefill_body(request.as_object().unwrap()));
        assert_eq!(body["max_tokens"], 1);
        assert_eq!(body["max_completion_tokens"], 1);
        assert_eq!(body["min_tokens"], 1);
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
        assert_eq!(body["temperature"], 0.2, "everything else is kept");
        assert_eq!(
            body[KV_TRANSFER_PARAMS],
            json!({"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null,
                   "remote_block_ids": null, "remote_host": null, "remote_port": null})
        );
    }
}
