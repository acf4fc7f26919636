//! A fleet of simulated pods served from one process, each on its own port, with an
//! admin API to pin metrics and to kill a pod.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::SERVED_BY_HEADER;
use crate::api;
use crate::engine::{Engine, EngineProfile};
use crate::metrics_text::{MetricsView, vllm_v1};
use crate::pinned::PinnedMetrics;

#[derive(Debug, Clone)]
pub struct PodSpec {
    pub address: SocketAddr,
    pub profile: EngineProfile,
    /// Model names this pod accepts; empty accepts any.
    pub models: Vec<String>,
    pub max_loras: u32,
}

pub struct Pod {
    spec: PodSpec,
    engine: Engine,
    pinned: RwLock<Option<PinnedMetrics>>,
    shutdown: Notify,
    ids: AtomicU64,
}

impl Pod {
    pub fn new(spec: PodSpec) -> Arc<Self> {
        Arc::new(Self {
            engine: Engine::new(spec.profile),
            spec,
            pinned: RwLock::new(None),
            shutdown: Notify::new(),
            ids: AtomicU64::new(0),
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.spec.address
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn serves(&self, model: &str) -> bool {
        self.spec.models.is_empty() || self.spec.models.iter().any(|m| m == model)
    }

    pub fn served_models(&self) -> Vec<String> {
        if self.spec.models.is_empty() {
            vec!["model-sim".to_string()]
        } else {
            self.spec.models.clone()
        }
    }

    pub fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    pub fn metrics_text(&self) -> String {
        let pinned = self.pinned.read().ok().and_then(|p| p.clone());
        let profile = self.engine.profile();
        vllm_v1(&MetricsView {
            model_name: self.spec.models.first().map_or("model-sim", String::as_str),
            stats: self.engine.stats(),
            pinned: pinned.as_ref(),
            block_size: profile.block_size,
            num_gpu_blocks: profile.kv_capacity_tokens / u64::from(profile.block_size.max(1)),
            max_loras: self.spec.max_loras,
            now_s: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        })
    }
}

async fn metrics(State(pod): State<Arc<Pod>>) -> Response {
    (
        [("content-type", "text/plain; version=0.0.4")],
        pod.metrics_text(),
    )
        .into_response()
}

async fn pin_metrics(
    State(pod): State<Arc<Pod>>,
    axum::Json(pinned): axum::Json<PinnedMetrics>,
) -> StatusCode {
    if let Ok(mut slot) = pod.pinned.write() {
        *slot = Some(pinned);
    }
    StatusCode::NO_CONTENT
}

async fn unpin_metrics(State(pod): State<Arc<Pod>>) -> StatusCode {
    if let Ok(mut slot) = pod.pinned.write() {
        *slot = None;
    }
    StatusCode::NO_CONTENT
}

async fn shutdown(State(pod): State<Arc<Pod>>) -> StatusCode {
    tracing::warn!(pod = %pod.address(), "shutdown requested through the admin API");
    pod.shutdown.notify_waiters();
    StatusCode::ACCEPTED
}

/// Names the pod on every response, and echoes the gateway's routing headers back as
/// `x-sim-echo-<name>` so that clients can see what reached the upstream.
async fn annotate(State(pod): State<Arc<Pod>>, request: Request, next: Next) -> Response {
    let echoed: Vec<(HeaderName, HeaderValue)> = request
        .headers()
        .iter()
        .filter(|(name, _)| name.as_str().starts_with("x-gateway-"))
        .filter_map(|(name, value)| {
            let echo = HeaderName::try_from(format!("x-sim-echo-{}", name.as_str())).ok()?;
            Some((echo, value.clone()))
        })
        .collect();
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::try_from(pod.address().to_string()) {
        headers.insert(SERVED_BY_HEADER, value);
    }
    for (name, value) in echoed {
        headers.insert(name, value);
    }
    response
}

pub fn router(pod: Arc<Pod>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(api::chat_completions))
        .route("/v1/completions", post(api::completions))
        .route("/v1/models", get(api::list_models))
        .route("/metrics", get(metrics))
        .route("/admin/metrics", post(pin_metrics).delete(unpin_metrics))
        .route("/admin/shutdown", post(shutdown))
        .layer(middleware::from_fn_with_state(Arc::clone(&pod), annotate))
        .with_state(pod)
}

/// Serves one pod until the admin API kills it or `stop` fires.
pub async fn serve(pod: Arc<Pod>, listener: TcpListener, stop: Arc<Notify>) -> std::io::Result<()> {
    let app = router(Arc::clone(&pod));
    let killed = Arc::clone(&pod);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            tokio::select! {
                () = killed.shutdown.notified() => {}
                () = stop.notified() => {}
            }
        })
        .await
}
