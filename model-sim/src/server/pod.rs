//! One simulated pod on its own port: the OpenAI API over its engine, `/metrics`, the
//! probes routers send a vLLM server (`/health`, `/version`), the KV handover of split
//! requests, and an admin API to pin metrics, inject faults and kill the pod.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::Notify;

use super::api;
use super::driver::DriverHandle;
use super::faults::Faults;
use super::handover::{self, CLAIM_PATH};
use super::kv_link::KvLink;
use super::kv_registry::KvRegistry;
use super::kv_transfer::PdSettings;
use super::metrics_text::pd::PdCounters;
use super::metrics_text::{MetricsFormat, MetricsView, pd, render};
use super::pinned::PinnedMetrics;
use crate::engine::EngineProfile;
use infergate_core::wire::header::SERVED_BY as SERVED_BY_HEADER;

#[derive(Debug, Clone)]
pub struct PodSpec {
    pub address: SocketAddr,
    pub profile: EngineProfile,
    /// Model names this pod accepts; empty accepts any.
    pub models: Vec<String>,
    /// Model names that are LoRA adapters on this pod: they use an adapter slot.
    pub adapters: Vec<String>,
    /// 1.0 is real time; 0.1 runs ten times faster.
    pub time_scale: f64,
    pub metrics_format: MetricsFormat,
    pub dp_size: u32,
    pub faults: Faults,
    /// Seed of the fault injector's random choices.
    pub seed: u64,
    /// Its part in prefill/decode disaggregation.
    pub pd: PdSettings,
    /// Where it publishes its KV events as vLLM does (`tcp://HOST:PORT` or
    /// `ipc://PATH`); `None` publishes none.
    pub kv_events: Option<String>,
}

impl PodSpec {
    pub fn new(address: SocketAddr, profile: EngineProfile) -> Self {
        Self {
            address,
            profile,
            models: Vec::new(),
            adapters: Vec::new(),
            time_scale: 1.0,
            metrics_format: MetricsFormat::Vllm,
            dp_size: 1,
            faults: Faults::default(),
            seed: 0,
            pd: PdSettings::default(),
            kv_events: None,
        }
    }
}

pub struct Pod {
    spec: PodSpec,
    driver: DriverHandle,
    pinned: RwLock<Option<PinnedMetrics>>,
    faults: RwLock<Faults>,
    frozen_metrics: RwLock<Option<String>>,
    rng: Mutex<fastrand::Rng>,
    shutdown: Notify,
    /// Set by the admin API's kill: answers being streamed stop at their next token.
    killed: std::sync::atomic::AtomicBool,
    ids: AtomicU64,
    kv_registry: KvRegistry,
    kv_link: KvLink,
    pd_counters: Mutex<PdCounters>,
    /// The next KV block id a prefill leg's answer names.
    next_block: AtomicU64,
}

impl Pod {
    /// Creates the pod and starts its engine driver (needs a Tokio runtime).
    pub fn new(spec: PodSpec) -> Arc<Self> {
        Arc::new(Self {
            driver: DriverHandle::spawn(spec.profile, spec.time_scale, spec.kv_events.clone()),
            pinned: RwLock::new(None),
            faults: RwLock::new(spec.faults.clone()),
            frozen_metrics: RwLock::new(None),
            rng: Mutex::new(fastrand::Rng::with_seed(spec.seed ^ u64::from(spec.address.port()))),
            shutdown: Notify::new(),
            killed: std::sync::atomic::AtomicBool::new(false),
            ids: AtomicU64::new(first_id(spec.address)),
            kv_registry: KvRegistry::new(lease(&spec)),
            kv_link: KvLink::new(),
            pd_counters: Mutex::new(PdCounters::default()),
            next_block: AtomicU64::new(0),
            spec,
        })
    }

    /// Whether the pod was killed: a crashed server sends nothing more.
    pub fn is_killed(&self) -> bool {
        self.killed.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn address(&self) -> SocketAddr {
        self.spec.address
    }

    pub fn driver(&self) -> &DriverHandle {
        &self.driver
    }

    pub fn serves(&self, model: &str) -> bool {
        self.spec.models.is_empty() || self.spec.models.iter().chain(&self.spec.adapters).any(|m| m == model)
    }

    /// The adapter a request for `model` needs, if `model` names one.
    pub fn adapter_for(&self, model: &str) -> Option<String> {
        self.spec.adapters.iter().find(|a| *a == model).cloned()
    }

    /// The base models and the adapters the pod serves, each adapter with its base
    /// model (`parent`), as vLLM lists its LoRA modules in `/v1/models`.
    pub fn served_models(&self) -> Vec<(String, Option<String>)> {
        let base = if self.spec.models.is_empty() { vec!["model-sim".to_string()] } else { self.spec.models.clone() };
        let parent = base.first().cloned();
        let adapters = self.spec.adapters.iter().map(|adapter| (adapter.clone(), parent.clone()));
        base.iter().map(|model| (model.clone(), None)).chain(adapters).collect()
    }

    /// A completion id, unique across pods as real engines' random ids are.
    pub fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    pub fn time_scale(&self) -> f64 {
        self.spec.time_scale
    }

    pub fn pd(&self) -> &PdSettings {
        &self.spec.pd
    }

    pub fn kv_registry(&self) -> &KvRegistry {
        &self.kv_registry
    }

    pub fn kv_link(&self) -> &KvLink {
        &self.kv_link
    }

    pub fn count_pd(&self, update: impl FnOnce(&mut PdCounters)) {
        if let Ok(mut counters) = self.pd_counters.lock() {
            update(&mut counters);
        }
    }

    /// The host a decode pod reaches this pod's held KV at.
    pub fn kv_host(&self) -> String {
        match &self.spec.pd.kv_host {
            Some(host) => host.clone(),
            None if self.spec.address.ip().is_unspecified() => Ipv4Addr::LOCALHOST.to_string(),
            None => self.spec.address.ip().to_string(),
        }
    }

    /// Ids of the KV blocks a prompt of `prompt_tokens` fills, as a prefill leg's
    /// answer lists them (`remote_block_ids`).
    pub fn block_ids(&self, prompt_tokens: u32) -> Vec<u64> {
        let count = u64::from(prompt_tokens.div_ceil(self.spec.profile.block_size.max(1)));
        let capacity = self.spec.profile.num_gpu_blocks.max(1);
        let first = self.next_block.fetch_add(count, Ordering::Relaxed);
        (first..first + count).map(|block| block % capacity).collect()
    }

    /// The most tokens (prompt and completion) one request can hold: the KV cache.
    pub fn max_context_tokens(&self) -> u64 {
        self.spec.profile.kv_capacity_tokens()
    }

    pub fn faults(&self) -> Faults {
        self.faults.read().map(|f| f.clone()).unwrap_or_default()
    }

    /// True for the share of requests the error-rate fault picks.
    pub fn roll_error(&self, rate: f64) -> bool {
        rate > 0.0 && self.rng.lock().map(|mut r| r.f64() < rate).unwrap_or(false)
    }

    pub fn metrics_text(&self) -> String {
        if let Some(frozen) = self.frozen_metrics.read().ok().and_then(|f| f.clone()) {
            return frozen;
        }
        let Some(published) = self.driver.published() else {
            return String::new();
        };
        let mut view = MetricsView {
            model_name: self.spec.models.first().map_or("model-sim", String::as_str),
            stats: published.stats,
            ttft: &published.ttft,
            itl: &published.itl,
            prefill: &published.prefill,
            profile: &self.spec.profile,
            dp_size: self.spec.dp_size.max(1),
            now_s: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
        };
        if let Some(pinned) = self.pinned.read().ok().and_then(|p| p.clone()) {
            view.pin(&pinned);
        }
        let mut text = render(self.spec.metrics_format, &view);
        let expired = self.kv_registry.expired_total(tokio::time::Instant::now());
        self.count_pd(|c| c.expired_leases = expired);
        if let Ok(counters) = self.pd_counters.lock() {
            text.push_str(&pd::render(self.spec.metrics_format, view.model_name, &counters));
        }
        text
    }

    fn set_faults(&self, faults: Faults) {
        let frozen = faults.freeze_metrics.then(|| self.metrics_text());
        if let Ok(mut slot) = self.frozen_metrics.write() {
            *slot = frozen;
        }
        if let Ok(mut slot) = self.faults.write() {
            *slot = faults;
        }
    }
}

/// vLLM's liveness probe: 200 with an empty body while the engine runs. Routers probe it
/// before they send a pod anything (smg and vllm-router refuse a worker without it).
async fn health(State(pod): State<Arc<Pod>>) -> StatusCode {
    if pod.is_killed() { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK }
}

/// What vLLM's `/version` answers, naming model-sim instead of a vLLM release.
async fn version() -> Response {
    axum::Json(serde_json::json!({"version": concat!("model-sim-", env!("CARGO_PKG_VERSION"))})).into_response()
}

async fn metrics(State(pod): State<Arc<Pod>>) -> Response {
    ([("content-type", "text/plain; version=0.0.4")], pod.metrics_text()).into_response()
}

async fn pin_metrics(State(pod): State<Arc<Pod>>, axum::Json(pinned): axum::Json<PinnedMetrics>) -> StatusCode {
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

async fn set_faults(State(pod): State<Arc<Pod>>, axum::Json(faults): axum::Json<Faults>) -> Response {
    if let Err(message) = faults.validate() {
        return (StatusCode::BAD_REQUEST, message).into_response();
    }
    tracing::warn!(pod = %pod.address(), ?faults, "faults set through the admin API");
    pod.set_faults(faults);
    StatusCode::NO_CONTENT.into_response()
}

async fn shutdown(State(pod): State<Arc<Pod>>) -> StatusCode {
    tracing::warn!(pod = %pod.address(), "shutdown requested through the admin API");
    pod.killed.store(true, std::sync::atomic::Ordering::SeqCst);
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
        .route("/v1/chat/completions/render", post(api::render))
        .route("/v1/completions/render", post(api::render))
        .route("/v1/models", get(api::list_models))
        .route("/health", get(health))
        .route("/version", get(version))
        .route("/metrics", get(metrics))
        // Where trtllm-serve (TensorRT-LLM 1.1 and later) serves Prometheus text.
        .route("/prometheus/metrics", get(metrics))
        .route("/admin/metrics", post(pin_metrics).delete(unpin_metrics))
        .route("/admin/faults", post(set_faults))
        .route("/admin/shutdown", post(shutdown))
        .route(CLAIM_PATH, post(handover::claim_endpoint))
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

/// How long a prefilled prompt's KV waits for its decode pod, in real time.
fn lease(spec: &PodSpec) -> std::time::Duration {
    let seconds = spec.pd.lease_s * spec.time_scale;
    std::time::Duration::try_from_secs_f64(seconds).unwrap_or(std::time::Duration::from_secs(480))
}

/// Where a pod's completion ids start: from the clock and the pod's port, so that two
/// pods (in one process or not) never answer with the same id. The fault seed stays
/// untouched: ids are not part of any replayed behaviour.
fn first_id(address: std::net::SocketAddr) -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    fastrand::Rng::with_seed(nanos ^ (u64::from(address.port()) << 48)).u64(1 << 40..1 << 56)
}
