//! Counters and gauges in Envoy's stats (`wasmcustom.infergate.*`). Ids are per VM, so
//! each root context defines its own; a failed definition just disables that metric.

use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;

#[derive(Debug, Clone, Copy)]
pub struct Metric(Option<u32>);

impl Metric {
    pub fn counter(name: &str) -> Self {
        Self(hostcalls::define_metric(MetricType::Counter, name).ok())
    }

    pub fn gauge(name: &str) -> Self {
        Self(hostcalls::define_metric(MetricType::Gauge, name).ok())
    }

    pub fn increment(self) {
        if let Some(id) = self.0 {
            let _ = hostcalls::increment_metric(id, 1);
        }
    }

    pub fn set(self, value: u64) {
        if let Some(id) = self.0 {
            let _ = hostcalls::record_metric(id, value);
        }
    }
}

/// The router's metrics.
#[derive(Debug, Clone, Copy)]
pub struct RouterMetrics {
    pub decisions_signals: Metric,
    pub decisions_mixed: Metric,
    pub decisions_load_only: Metric,
    pub rejected: Metric,
    /// Sheddable requests refused with 429 because their pool was saturated.
    pub shed: Metric,
    /// Bodies the streaming scanner left to the whole-body parse: every invalid body,
    /// and valid ones of an unusual shape.
    pub full_parses: Metric,
    pub snapshot_generation: Metric,
    pub snapshot_age_ms: Metric,
    pub snapshot_decode_failures: Metric,
    /// Snapshots decoded, summed over workers: one per generation per worker.
    pub snapshot_decodes: Metric,
    /// This VM's linear memory; every worker sets it, so it shows the latest one's.
    pub vm_memory_bytes: Metric,
}

impl RouterMetrics {
    pub fn define() -> Self {
        Self {
            decisions_signals: Metric::counter("infergate.decisions.signals"),
            decisions_mixed: Metric::counter("infergate.decisions.mixed"),
            decisions_load_only: Metric::counter("infergate.decisions.load_only"),
            rejected: Metric::counter("infergate.requests.rejected"),
            shed: Metric::counter("infergate.requests.shed"),
            full_parses: Metric::counter("infergate.requests.full_parses"),
            snapshot_generation: Metric::gauge("infergate.snapshot.generation"),
            snapshot_age_ms: Metric::gauge("infergate.snapshot.age_ms"),
            snapshot_decode_failures: Metric::counter("infergate.snapshot.decode_failures"),
            snapshot_decodes: Metric::counter("infergate.snapshot.decodes"),
            vm_memory_bytes: Metric::gauge("infergate.vm.memory_bytes"),
        }
    }
}

/// Per-pool counters: `wasmcustom.infergate.pool.<pool>.*`.
#[derive(Debug, Clone, Copy)]
pub struct PoolMetrics {
    pub decisions: Metric,
    /// Decisions made on in-flight counts alone (no fresh signals).
    pub load_only: Metric,
    /// Decisions whose chosen pod held part of the prompt.
    pub prefix_hits: Metric,
    /// Decisions that left a longer prefix holder for a faster pod.
    pub spills: Metric,
}

impl PoolMetrics {
    pub fn define(pool: &str) -> Self {
        let name = |what: &str| format!("infergate.pool.{pool}.{what}");
        Self {
            decisions: Metric::counter(&name("decisions")),
            load_only: Metric::counter(&name("load_only")),
            prefix_hits: Metric::counter(&name("prefix_hits")),
            spills: Metric::counter(&name("spills")),
        }
    }
}

/// The control listener's metrics.
#[derive(Debug, Clone, Copy)]
pub struct ControlMetrics {
    pub accepted: Metric,
    pub unauthorized: Metric,
    pub invalid: Metric,
}

impl ControlMetrics {
    pub fn define() -> Self {
        Self {
            accepted: Metric::counter("infergate.control.accepted"),
            unauthorized: Metric::counter("infergate.control.unauthorized"),
            invalid: Metric::counter("infergate.control.invalid"),
        }
    }
}

/// The global router's metrics.
#[derive(Debug, Clone, Copy)]
pub struct GlobalMetrics {
    pub decisions: Metric,
    /// Decisions whose first cluster had no fresh, healthy summary.
    pub blind: Metric,
    pub rejected: Metric,
    /// As the router's `full_parses`.
    pub full_parses: Metric,
}

impl GlobalMetrics {
    pub fn define() -> Self {
        Self {
            decisions: Metric::counter("infergate.global.decisions"),
            blind: Metric::counter("infergate.global.blind"),
            rejected: Metric::counter("infergate.global.rejected"),
            full_parses: Metric::counter("infergate.global.full_parses"),
        }
    }
}
