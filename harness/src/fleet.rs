//! The simulated pods, in this process on real loopback sockets.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::response::IntoResponse;
use infergate_model_sim::engine::EngineProfile;
use infergate_model_sim::server::{Pod, PodSpec, serve};
use tokio::net::TcpListener;
use tokio::sync::Notify;

pub struct Fleet {
    pub pods: Vec<SocketAddr>,
    stop: Arc<Notify>,
    /// When each instant pod got the headers of a request that carried
    /// [`ARRIVAL_HEADER`], by its value.
    arrivals: Arrivals,
}

type Arrivals = Arc<Mutex<HashMap<String, Instant>>>;

/// A request with this header has the moment an instant pod got its headers (before
/// its body) noted under the header's value, for [`Fleet::arrival`].
pub const ARRIVAL_HEADER: &str = "x-bench-request-id";

impl Fleet {
    pub async fn start(count: usize, profile: EngineProfile, time_scale: f64, adapters: &[String]) -> Self {
        Self::start_serving(count, profile, time_scale, &[], adapters).await
    }

    /// Pods that serve only `models` (any model when empty) and `adapters`: a request
    /// for another model gets the 404 an engine gives.
    pub async fn start_serving(
        count: usize,
        profile: EngineProfile,
        time_scale: f64,
        models: &[String],
        adapters: &[String],
    ) -> Self {
        Self::start_shaped(count, profile, time_scale, models, adapters, &|_, spec| spec).await
    }

    /// As [`Fleet::start_serving`], each pod's spec passed through `shape` with its
    /// index first (to give pods prefill/decode roles, say).
    pub async fn start_shaped(
        count: usize,
        profile: EngineProfile,
        time_scale: f64,
        models: &[String],
        adapters: &[String],
        shape: &(dyn Fn(usize, PodSpec) -> PodSpec + Send + Sync),
    ) -> Self {
        let stop = Arc::new(Notify::new());
        let mut pods = Vec::new();
        for index in 0..count {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a pod port");
            let address = listener.local_addr().expect("pod address");
            let pod = Pod::new(shape(
                index,
                PodSpec {
                    time_scale,
                    models: models.to_vec(),
                    adapters: adapters.to_vec(),
                    ..PodSpec::new(address, profile)
                },
            ));
            tokio::spawn(serve(pod, listener, Arc::clone(&stop)));
            pods.push(address);
        }
        Self { pods, stop, arrivals: Arrivals::default() }
    }
}

/// What a near-instant pod reports: an idle vLLM V1 server, so that the agent and the
/// filter do their full work on every scrape and request.
const IDLE_VLLM_METRICS: &str = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0.0\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 0.0\n# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.0\n";

/// The request header that makes an instant pod wait before it answers, milliseconds.
pub const HOLD_HEADER: &str = "x-bench-hold-ms";

impl Fleet {
    /// Pods that read the whole request body and answer at once with a small
    /// completion, for measuring the gateway's own cost without an engine's. A request
    /// with [`HOLD_HEADER`] is answered after that many milliseconds instead (at most a
    /// minute), to hold many streams open at once.
    pub async fn start_instant(count: usize) -> Self {
        let stop = Arc::new(Notify::new());
        let arrivals = Arrivals::default();
        let mut pods = Vec::new();
        for _ in 0..count {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a pod port");
            let address = listener.local_addr().expect("pod address");
            let served_by = address.to_string();
            let noted = Arc::clone(&arrivals);
            let app = axum::Router::new()
                .route("/metrics", axum::routing::get(|| async { IDLE_VLLM_METRICS }))
                .fallback(move |request: axum::extract::Request| {
                    let served_by = served_by.clone();
                    let headers = request.headers();
                    if let Some(id) = headers.get(ARRIVAL_HEADER).and_then(|v| v.to_str().ok()) {
                        if let Ok(mut arrivals) = noted.lock() {
                            arrivals.insert(id.to_string(), Instant::now());
                        }
                    }
                    let hold_ms = headers
                        .get(HOLD_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok())
                        .map_or(0, |ms| ms.min(60_000));
                    async move {
                        let body = axum::body::to_bytes(request.into_body(), usize::MAX).await.unwrap_or_default();
                        if hold_ms > 0 {
                            tokio::time::sleep(std::time::Duration::from_millis(hold_ms)).await;
                        }
                        let reply = format!(
                            "{{\"id\":\"cmpl-1\",\"object\":\"chat.completion\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":\"ok\"}},\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":{},\"completion_tokens\":1}}}}",
                            body.len() / 4
                        );
                        ([("content-type", "application/json"), (infergate_core::wire::header::SERVED_BY, served_by.as_str())], reply)
                            .into_response()
                    }
                });
            let stopped = Arc::clone(&stop);
            tokio::spawn(async move {
                let _ =
                    axum::serve(listener, app).with_graceful_shutdown(async move { stopped.notified().await }).await;
            });
            pods.push(address);
        }
        Self { pods, stop, arrivals }
    }

    /// When an instant pod got the headers of the request whose [`ARRIVAL_HEADER`] was
    /// `id`, taken out of the record.
    pub fn arrival(&self, id: &str) -> Option<Instant> {
        self.arrivals.lock().ok()?.remove(id)
    }
}

impl Fleet {
    /// Pods this harness did not start (real engines): only their addresses.
    pub fn external(pods: Vec<SocketAddr>) -> Self {
        Self { pods, stop: Arc::new(Notify::new()), arrivals: Arrivals::default() }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop.notify_waiters();
    }
}
