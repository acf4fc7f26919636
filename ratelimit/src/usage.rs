//! `POST /v1/usage`: the global router's filter reports the tokens an answer really
//! used; the difference from what admission charged goes to the same window.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use infergate_core::control::bearer_token_matches;
use infergate_core::global::metering::UsageReport;
use infergate_core::wire::path::USAGE as USAGE_PATH;

use crate::charge::{Kind, counter_key};
use crate::counter::window;
use crate::service::{Limiter, unix_s};

pub struct UsageState {
    pub limiter: Arc<Limiter>,
    pub token: String,
}

pub fn router(state: Arc<UsageState>) -> axum::Router {
    axum::Router::new().route(USAGE_PATH, axum::routing::post(report)).with_state(state)
}

async fn report(
    State(state): State<Arc<UsageState>>,
    headers: HeaderMap,
    Json(batch): Json<Vec<UsageReport>>,
) -> StatusCode {
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok());
    if !bearer_token_matches(authorization, &state.token) {
        return StatusCode::UNAUTHORIZED;
    }
    let (window, _) = window(unix_s());
    for usage in batch {
        let delta = i64::try_from(usage.used_tokens).unwrap_or(i64::MAX)
            - i64::try_from(usage.charged_tokens).unwrap_or(i64::MAX);
        if delta == 0 {
            continue;
        }
        let key = counter_key(Kind::Tokens, &usage.tenant, &usage.model, window);
        if let Err(err) = state.limiter.counter.add(&key, delta).await {
            tracing::warn!(error = %err, "cannot reconcile usage in Redis");
            return StatusCode::SERVICE_UNAVAILABLE;
        }
    }
    StatusCode::NO_CONTENT
}
