//! The router's stats: decisions by basis, refusals, snapshot health, per-pool
//! decisions and TTFT, the prefix peers' traffic, and the VM's memory.

use std::cell::Cell;
use std::rc::Rc;

use infergate_core::flow::Refusal;
use infergate_core::wire::stat;

use super::split::Fallback;
use crate::host::Host;
use crate::metrics::Metric;
use crate::roles::front::intake::EarlyRouting;

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
    pub early: EarlyRouting,
    /// Requests routed early that the pod refused with a 400: a body the scanner could
    /// not follow to the end, which the engine judged.
    pub early_engine_refused: Metric,
    pub snapshot_generation: Metric,
    pub snapshot_age_ms: Metric,
    pub snapshot_decode_failures: Metric,
    /// Snapshots decoded, summed over workers: one per generation per worker.
    pub snapshot_decodes: Metric,
    pub vm_memory: VmMemory,
    pub pd: PdMetrics,
}

impl RouterMetrics {
    pub fn define(host: &Rc<dyn Host>) -> Self {
        Self {
            decisions_signals: Metric::counter(host, "infergate.decisions.signals"),
            decisions_mixed: Metric::counter(host, "infergate.decisions.mixed"),
            decisions_load_only: Metric::counter(host, "infergate.decisions.load_only"),
            rejected: Metric::counter(host, "infergate.requests.rejected"),
            shed: Metric::counter(host, "infergate.requests.shed"),
            full_parses: Metric::counter(host, "infergate.requests.full_parses"),
            early: EarlyRouting {
                routed: Metric::counter(host, "infergate.requests.routed_early"),
                refused: Metric::counter(host, "infergate.requests.early.refused"),
                unverified: Metric::counter(host, "infergate.requests.early.unverified"),
            },
            early_engine_refused: Metric::counter(host, "infergate.requests.early.engine_refused"),
            snapshot_generation: Metric::gauge(host, "infergate.snapshot.generation"),
            snapshot_age_ms: Metric::gauge(host, "infergate.snapshot.age_ms"),
            snapshot_decode_failures: Metric::counter(host, "infergate.snapshot.decode_failures"),
            snapshot_decodes: Metric::counter(host, "infergate.snapshot.decodes"),
            vm_memory: VmMemory { gauge: Metric::gauge(host, "infergate.vm.memory_bytes"), reported: Cell::new(0) },
            pd: PdMetrics::define(host),
        }
    }
}

/// Prefill/decode disaggregation, summed over workers: decisions split or served whole,
/// the gateway's prefill legs answered and their time, and the split requests served
/// whole after all, by reason (`split::Fallback`).
pub struct PdMetrics {
    pub split: Metric,
    pub whole: Metric,
    pub prefill_ok: Metric,
    pub prefill_ms: Metric,
    fallbacks: Vec<(Fallback, Metric)>,
}

impl PdMetrics {
    pub fn define(host: &Rc<dyn Host>) -> Self {
        Self {
            split: Metric::counter(host, stat::PD_SPLIT),
            whole: Metric::counter(host, stat::PD_WHOLE),
            prefill_ok: Metric::counter(host, stat::PD_PREFILL_OK),
            prefill_ms: Metric::histogram(host, stat::PD_PREFILL_MS),
            fallbacks: Fallback::ALL
                .iter()
                .map(|&why| (why, Metric::counter(host, &format!("{}{}", stat::PD_FALLBACK_PREFIX, why.as_str()))))
                .collect(),
        }
    }

    pub fn fallback(&self, why: Fallback) {
        if let Some((_, metric)) = self.fallbacks.iter().find(|(w, _)| *w == why) {
            metric.increment();
        }
    }
}

/// The gateway queue's stats, summed over workers: requests held now, released,
/// refused by reason (and cancelled by their clients), and the wait of each released
/// request.
pub struct FlowMetrics {
    pub queued: Metric,
    pub released: Metric,
    pub wait_ms: Metric,
    pub cancelled: Metric,
    queue_full: Metric,
    displaced: Metric,
    expired: Metric,
}

impl FlowMetrics {
    pub fn define(host: &Rc<dyn Host>) -> Self {
        Self {
            queued: Metric::gauge(host, "infergate.flow.queued"),
            released: Metric::counter(host, "infergate.flow.released"),
            wait_ms: Metric::histogram(host, "infergate.flow.wait_ms"),
            cancelled: Metric::counter(host, "infergate.flow.dropped.cancelled"),
            queue_full: Metric::counter(host, "infergate.flow.dropped.queue_full"),
            displaced: Metric::counter(host, "infergate.flow.dropped.displaced"),
            expired: Metric::counter(host, "infergate.flow.dropped.expired"),
        }
    }

    pub fn dropped(&self, why: Refusal) {
        match why {
            Refusal::QueueFull => self.queue_full.increment(),
            Refusal::Displaced => self.displaced.increment(),
            Refusal::Expired => self.expired.increment(),
        }
    }
}

/// `infergate.vm.memory_bytes`: the linear memory of all worker VMs, summed. Each VM
/// adds what its memory grew since it last reported (on every new snapshot) and
/// takes its share out when its plugin is torn down.
pub struct VmMemory {
    gauge: Metric,
    /// What this VM has added to the gauge.
    reported: Cell<u64>,
}

impl VmMemory {
    pub fn report(&self, host: &dyn Host) {
        let now = host.vm_memory_bytes();
        let before = self.reported.replace(now);
        self.gauge.shift(signed(now).saturating_sub(signed(before)));
    }

    /// Withdraws this VM's share, so a reload that replaces the VMs does not leave
    /// their memory counted.
    pub fn withdraw(&self) {
        let before = self.reported.replace(0);
        self.gauge.shift(signed(before).saturating_neg());
    }
}

fn signed(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// Per-pool stats: `wasmcustom.infergate.pool.<pool>.*`.
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
    /// The pool's prompt characters per engine token, learned from answers' `usage`, × 1000.
    pub chars_per_token_milli: Metric,
    /// The share of prompt tokens the pool's pods found in their prefix caches over the
    /// share this worker believed cached on what it sent them, × 1000
    /// (`core/src/router/cache_truth.rs`): the prefix index checked against the pods.
    pub prefix_found_per_believed_milli: Metric,
}

impl PoolMetrics {
    pub fn define(host: &Rc<dyn Host>, pool: &str) -> Self {
        let name = |what: &str| format!("infergate.pool.{pool}.{what}");
        Self {
            decisions: Metric::counter(host, &name("decisions")),
            load_only: Metric::counter(host, &name("load_only")),
            prefix_hits: Metric::counter(host, &name("prefix_hits")),
            spills: Metric::counter(host, &name("spills")),
            ttft_observed_ms: Metric::histogram(host, &name("ttft_observed_ms")),
            ttft_abs_error_ms: Metric::histogram(host, &name("ttft_abs_error_ms")),
            ttft_factor_milli: Metric::gauge(host, &name("ttft_factor_milli")),
            chars_per_token_milli: Metric::gauge(host, &name("chars_per_token_milli")),
            prefix_found_per_believed_milli: Metric::gauge(host, &name("prefix_found_per_believed_milli")),
        }
    }
}

/// How prefix records reach the other workers: each batch goes to every other
/// worker's queue, so `enqueued / batches` is the number of peers a worker sends to.
pub struct PeerMetrics {
    pub batches: Metric,
    pub enqueued: Metric,
}

impl PeerMetrics {
    pub fn define(host: &Rc<dyn Host>) -> Self {
        Self {
            batches: Metric::counter(host, "infergate.prefix.batches"),
            enqueued: Metric::counter(host, "infergate.prefix.enqueued"),
        }
    }
}
