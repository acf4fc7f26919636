//! The picker's HTTP side, on the address the agent pushes to: snapshot pushes (the
//! same path, token and MessagePack as the gateway's control listener, so the agent
//! runs unchanged), `/metrics`, `/healthz` and `/readyz`.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use infergate_core::control::bearer_token_matches;
use infergate_core::snapshot::MAX_SNAPSHOT_BYTES;
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

async fn push(State(state): State<Arc<ControlState>>, headers: HeaderMap, body: Bytes) -> Response {
    let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if !bearer_token_matches(authorization, &state.token) {
        tracing::warn!("refused a snapshot push without the right bearer token");
        return error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
    }
    match state.picker.push_snapshot(&body) {
        Ok(sequence) => {
            tracing::debug!(sequence, "adopted snapshot");
            StatusCode::NO_CONTENT.into_response()
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
