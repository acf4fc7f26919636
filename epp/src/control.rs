//! The picker's HTTP side, on the address the agent pushes to: snapshot pushes and,
//! with several pickers, load pushes (the same paths, token and MessagePack as the
//! gateway's control listener, so the agent runs unchanged), `/metrics`, `/healthz`
//! and `/readyz`.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use infergate_core::control::bearer_token_matches;
use infergate_core::snapshot::MAX_SNAPSHOT_BYTES;
use infergate_core::wire::header::REPLICAS;
use infergate_core::wire::path;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

use crate::picker::{Picker, PushRefusal};

pub struct ControlState {
    pub picker: Arc<Picker>,
    pub token: String,
    pub registry: Registry,
}

pub fn router(state: Arc<ControlState>) -> Router {
    Router::new()
        .route(path::SNAPSHOT, post(push))
        .route(path::LOAD, post(load))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .layer(DefaultBodyLimit::max(MAX_SNAPSHOT_BYTES))
        .with_state(state)
}

fn error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Whether the push carries the agent's bearer token; logged when not.
fn authorized(state: &ControlState, headers: &HeaderMap) -> bool {
    let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let matches = bearer_token_matches(authorization, &state.token);
    if !matches {
        tracing::warn!("refused a push without the right bearer token");
    }
    matches
}

fn unauthorized() -> Response {
    error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token")
}

fn msgpack(bytes: Vec<u8>) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/msgpack")], bytes).into_response()
}

async fn push(State(state): State<Arc<ControlState>>, headers: HeaderMap, body: Bytes) -> Response {
    if !authorized(&state, &headers) {
        return unauthorized();
    }
    // With several pickers the agent says how many, and passes each one's digest on.
    let replicated =
        headers.get(REPLICAS).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u32>().ok()).unwrap_or(1) > 1;
    match state.picker.push_snapshot(&body, replicated) {
        Ok((sequence, None)) => {
            tracing::debug!(sequence, "adopted snapshot");
            StatusCode::NO_CONTENT.into_response()
        }
        Ok((sequence, Some(digest))) => {
            tracing::debug!(
                sequence,
                records = digest.records.len(),
                "adopted snapshot; answered with this picker's digest"
            );
            msgpack(digest.encode())
        }
        Err(PushRefusal::Invalid(why)) => {
            tracing::warn!(%why, "refused snapshot");
            error(StatusCode::BAD_REQUEST, &why)
        }
        Err(PushRefusal::Stale { sequence, newest }) => {
            tracing::warn!(sequence, newest, "refused snapshot: not newer (a replay, or a second agent)");
            error(StatusCode::CONFLICT, &format!("sequence {sequence} is not newer than {newest}, the newest admitted"))
        }
    }
}

/// The other pickers' load between snapshots; the answer is this picker's.
async fn load(State(state): State<Arc<ControlState>>, headers: HeaderMap, body: Bytes) -> Response {
    if !authorized(&state, &headers) {
        return unauthorized();
    }
    match state.picker.exchange_load(&body) {
        Ok(own) => msgpack(own.encode()),
        Err(why) => {
            tracing::warn!(%why, "refused a load push");
            error(StatusCode::BAD_REQUEST, &why)
        }
    }
}

async fn metrics(State(state): State<Arc<ControlState>>) -> Response {
    let mut text = String::new();
    match encode(&mut text, &state.registry) {
        Ok(()) => ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text)
            .into_response(),
        Err(err) => error(StatusCode::INTERNAL_SERVER_ERROR, &err.to_string()),
    }
}

async fn ready(State(state): State<Arc<ControlState>>) -> Response {
    if state.picker.ready() {
        "ready".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "no snapshot yet").into_response()
    }
}
