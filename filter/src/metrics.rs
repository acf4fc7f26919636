//! Counters and gauges in Envoy's stats (`wasmcustom.infergate.*`). Ids are per VM, so
//! each root context defines its own; a failed definition just disables that metric.

use std::cell::Cell;

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

    pub fn histogram(name: &str) -> Self {
        Self(hostcalls::define_metric(MetricType::Histogram, name).ok())
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

    /// Moves a gauge by `delta`. Every worker VM's gauge of one name is one stat, so
    /// moves from all workers add up where a `set` from one would overwrite the others.
    fn shift(self, delta: i64) {
        if let (Some(id), true) = (self.0, delta != 0) {
            let _ = hostcalls::increment_metric(id, delta);
        }
    }
}

thread_local! {
    /// What this VM has added to `infergate.vm.memory_bytes`.
    static VM_MEMORY_REPORTED: Cell<u64> = const { Cell::new(0) };
}

/// The VM's linear memory, which only grows: its high-water mark.
fn vm_memory_bytes() -> u64 {
    #[cfg(target_arch = "wasm32")]
    {
        (core::arch::wasm32::memory_size(0) as u64).saturating_mul(65_536)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        0
    }
}

/// Adds what this VM's memory grew since it last reported to the gauge, which so
/// sums the linear memory of all worker VMs.
pub fn report_vm_memory(gauge: Metric) {
    let now = vm_memory_bytes();
    let before = VM_MEMORY_REPORTED.with(|reported| reported.replace(now));
    gauge.shift(i64::try_from(now).unwrap_or(i64::MAX).saturating_sub(i64::try_from(before).unwrap_or(i64::MAX)));
}

/// Takes this VM's share out of the gauge when its plugin is torn down, so a reload
/// that replaces the VMs does not leave their memory counted.
pub fn withdraw_vm_memory(gauge: Metric) {
    let before = VM_MEMORY_REPORTED.with(|reported| reported.replace(0));
    gauge.shift(i64::try_from(before).map_or(i64::MIN, |b| -b));
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
    /// The linear memory of all worker VMs, summed; each reports its growth on every
    /// new snapshot.
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
    /// Streamed requests' time from the decision to the first chunk, ms (histogram).
    pub ttft_observed_ms: Metric,
    /// |observed − predicted| of the same, ms (histogram): how far the cost is off.
    pub ttft_abs_error_ms: Metric,
    /// The pool's learned correction of its predictions, observed / predicted × 1000.
    pub ttft_factor_milli: Metric,
}

impl PoolMetrics {
    pub fn define(pool: &str) -> Self {
        let name = |what: &str| format!("infergate.pool.{pool}.{what}");
        Self {
            decisions: Metric::counter(&name("decisions")),
            load_only: Metric::counter(&name("load_only")),
            prefix_hits: Metric::counter(&name("prefix_hits")),
            spills: Metric::counter(&name("spills")),
            ttft_observed_ms: Metric::histogram(&name("ttft_observed_ms")),
            ttft_abs_error_ms: Metric::histogram(&name("ttft_abs_error_ms")),
            ttft_factor_milli: Metric::gauge(&name("ttft_factor_milli")),
        }
    }
}

/// How prefix records reach the other workers: each batch goes to every other
/// worker's queue, so `enqueued / batches` is the number of peers a worker sends to.
#[derive(Debug, Clone, Copy)]
pub struct PeerMetrics {
    pub batches: Metric,
    pub enqueued: Metric,
}

impl PeerMetrics {
    pub fn define() -> Self {
        Self {
            batches: Metric::counter("infergate.prefix.batches"),
            enqueued: Metric::counter("infergate.prefix.enqueued"),
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
