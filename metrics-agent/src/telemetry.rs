//! The agent's own endpoints: `/metrics` (Prometheus, via `prometheus-client`),
//! `/healthz` (the process runs) and `/readyz` (the last push reached every gateway).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodLabel {
    pub pod: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabel {
    pub target: String,
}

/// Everything the agent reports about itself.
pub struct Telemetry {
    registry: Mutex<Registry>,
    pub scrape_seconds: Histogram,
    pub scrape_errors: Family<PodLabel, Counter>,
    pub push_seconds: Histogram,
    pub push_errors: Family<TargetLabel, Counter>,
    pub snapshot_bytes: Gauge,
    pub snapshots: Counter,
    pub pods: Gauge,
    pub fleet_changes: Counter,
    pub push_age_seconds: Family<TargetLabel, Gauge<f64, AtomicU64>>,
    pub gateways: Gauge,
    /// Prefix records the gateway replicas sent, to pass on to the others.
    pub replica_records: Counter,
    /// Load pushes between snapshots that a replica answered, and those that failed.
    pub load_pushes: Counter,
    pub load_push_errors: Counter,
    /// The pods with a `scrape_errors` series.
    pods_with_series: Mutex<BTreeSet<String>>,
    /// The snapshot push targets with `push_errors` and `push_age_seconds` series.
    gateways_with_series: Mutex<BTreeSet<String>>,
    ready: AtomicBool,
}

impl Telemetry {
    /// Gives every pod of the fleet a `scrape_errors` series from 0, so that a rate over
    /// it exists before the first failure, and drops the series of pods that left, so
    /// that pod churn does not grow the exposition.
    pub fn track_pods<'a>(&self, pods: impl Iterator<Item = &'a str>) {
        let label = |pod: &str| PodLabel { pod: pod.to_string() };
        track(
            &self.pods_with_series,
            pods,
            |gone| {
                self.scrape_errors.remove(&label(gone));
            },
            |new| {
                let _ = self.scrape_errors.get_or_create(&label(new));
            },
        );
    }

    /// As [`Self::track_pods`], for the gateways snapshots are pushed to, which change
    /// when the control Service's endpoints do.
    pub fn track_gateways<'a>(&self, targets: impl Iterator<Item = &'a str>) {
        let label = |target: &str| TargetLabel { target: target.to_string() };
        let count = track(
            &self.gateways_with_series,
            targets,
            |gone| {
                self.push_errors.remove(&label(gone));
                self.push_age_seconds.remove(&label(gone));
            },
            |new| {
                let _ = self.push_errors.get_or_create(&label(new));
            },
        );
        self.gateways.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    pub fn new() -> Arc<Self> {
        let telemetry = Telemetry {
            registry: Mutex::new(Registry::with_prefix("infergate_agent")),
            scrape_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 12)),
            scrape_errors: Family::default(),
            push_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 12)),
            push_errors: Family::default(),
            snapshot_bytes: Gauge::default(),
            snapshots: Counter::default(),
            pods: Gauge::default(),
            fleet_changes: Counter::default(),
            push_age_seconds: Family::default(),
            gateways: Gauge::default(),
            replica_records: Counter::default(),
            load_pushes: Counter::default(),
            load_push_errors: Counter::default(),
            pods_with_series: Mutex::new(BTreeSet::new()),
            gateways_with_series: Mutex::new(BTreeSet::new()),
            ready: AtomicBool::new(false),
        };
        if let Ok(mut registry) = telemetry.registry.lock() {
            registry.register(
                "scrape_duration_seconds",
                "Time to scrape all pods once",
                telemetry.scrape_seconds.clone(),
            );
            registry.register("scrape_errors", "Failed scrapes, by pod", telemetry.scrape_errors.clone());
            registry.register(
                "push_duration_seconds",
                "Time to push one snapshot to every gateway",
                telemetry.push_seconds.clone(),
            );
            registry.register("push_errors", "Failed pushes, by gateway", telemetry.push_errors.clone());
            registry.register("snapshot_bytes", "Size of the last snapshot", telemetry.snapshot_bytes.clone());
            registry.register("snapshots", "Snapshots built", telemetry.snapshots.clone());
            registry.register("pods", "Pods scraped, static and discovered", telemetry.pods.clone());
            registry.register(
                "fleet_changes",
                "Config or pod-set changes, each pushed at once",
                telemetry.fleet_changes.clone(),
            );
            registry.register(
                "push_age_seconds",
                "Age of the snapshot each gateway holds: time since its last accepted push",
                telemetry.push_age_seconds.clone(),
            );
            registry.register("gateways", "Gateway replicas snapshots are pushed to", telemetry.gateways.clone());
            registry.register(
                "replica_prefix_records",
                "Prefix records gateway replicas reported, passed on to the other replicas",
                telemetry.replica_records.clone(),
            );
            registry.register(
                "load_pushes",
                "Pushes of the other replicas' load between snapshots, answered with the replica's own",
                telemetry.load_pushes.clone(),
            );
            registry.register(
                "load_push_errors",
                "Load pushes between snapshots that failed or were refused",
                telemetry.load_push_errors.clone(),
            );
        }
        Arc::new(telemetry)
    }

    /// Ready once a push has reached every gateway; not ready while any fails, or while
    /// there is no gateway to push to.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Ok(registry) = self.registry.lock() {
            let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        }
        out
    }
}

async fn metrics(State(telemetry): State<Arc<Telemetry>>) -> impl IntoResponse {
    ([("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")], telemetry.encode())
}

async fn healthz() -> StatusCode {
    StatusCode::OK
}

async fn readyz(State(telemetry): State<Arc<Telemetry>>) -> StatusCode {
    if telemetry.ready.load(Ordering::Relaxed) { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }
}

/// Serves the endpoints until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, telemetry: Arc<Telemetry>) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(telemetry);
    axum::serve(listener, app).await
}

/// Replaces the `known` names with `current`, calling `gone` for each name that left
/// and `new` for each that arrived. Returns how many there are now.
fn track<'a>(
    known: &Mutex<BTreeSet<String>>,
    current: impl Iterator<Item = &'a str>,
    mut gone: impl FnMut(&str),
    mut new: impl FnMut(&str),
) -> usize {
    let Ok(mut known) = known.lock() else { return 0 };
    let current: BTreeSet<String> = current.map(String::from).collect();
    known.difference(&current).for_each(|name| gone(name));
    current.difference(&known).for_each(|name| new(name));
    *known = current;
    known.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_the_families_with_their_labels() {
        let telemetry = Telemetry::new();
        telemetry.scrape_errors.get_or_create(&PodLabel { pod: "10.0.0.1:8000".into() }).inc();
        telemetry.snapshot_bytes.set(123);
        let text = telemetry.encode();
        assert!(text.contains("infergate_agent_scrape_errors_total{pod=\"10.0.0.1:8000\"} 1"), "{text}");
        assert!(text.contains("infergate_agent_snapshot_bytes 123"), "{text}");
    }

    #[test]
    fn every_pod_has_an_error_series_from_zero_and_departed_pods_lose_theirs() {
        let telemetry = Telemetry::new();
        telemetry.track_pods(["10.0.0.1:8000", "10.0.0.2:8000"].into_iter());
        telemetry.scrape_errors.get_or_create(&PodLabel { pod: "10.0.0.2:8000".into() }).inc();
        telemetry.track_pods(["10.0.0.2:8000", "10.0.0.3:8000"].into_iter());
        let text = telemetry.encode();
        assert!(!text.contains("10.0.0.1:8000"), "{text}");
        assert!(text.contains("infergate_agent_scrape_errors_total{pod=\"10.0.0.2:8000\"} 1"), "{text}");
        assert!(text.contains("infergate_agent_scrape_errors_total{pod=\"10.0.0.3:8000\"} 0"), "{text}");
    }
}
