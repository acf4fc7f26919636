//! The router role: per-worker state shared by its HTTP contexts.

mod http;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use infergate_core::endpoint::Endpoint;
use infergate_core::filter_config::{GENERATION_KEY, RouterRole, SNAPSHOT_KEY};
use infergate_core::prefix::PrefixRecord;
use infergate_core::router::Router;
use infergate_core::snapshot::Snapshot;

use crate::host;
use crate::ledger::SharedLedger;
use crate::metrics::{PoolMetrics, RouterMetrics, report_vm_memory, withdraw_vm_memory};
use crate::peers::PrefixPeers;
use crate::singleton::decode_generation;
pub use http::{DECISION_HEADER, ENDPOINT_HEADER, MODEL_HEADER, RouterHttp};

pub struct RouterShared {
    router: RefCell<Router>,
    /// The snapshot generation this worker last decoded.
    generation: Cell<u64>,
    max_body_bytes: u64,
    explain: bool,
    metrics: RouterMetrics,
    pools: RefCell<HashMap<String, PoolMetrics>>,
    peers: PrefixPeers,
}

impl RouterShared {
    pub fn new(role: RouterRole) -> Self {
        log::info!(
            "infergate router: {} pools, {} models, body limit {} bytes, scoring {:?}",
            role.routing.pools.len(),
            role.routing.models.len(),
            role.max_body_bytes,
            role.routing.settings.scoring,
        );
        Self {
            router: RefCell::new(Router::new(role.routing, random_u64())),
            generation: Cell::new(0),
            max_body_bytes: role.max_body_bytes,
            explain: role.explain,
            metrics: RouterMetrics::define(),
            pools: RefCell::new(HashMap::new()),
            peers: PrefixPeers::new(&role.vm_id, random_u64()),
        }
    }

    /// How much of a prompt prefix hashing reads, under the active routing config.
    fn prompt_bytes_hashed(&self) -> usize {
        self.router.try_borrow().map_or(0, |router| router.config().settings.prefix.hashed_bytes())
    }

    /// Reads the small generation key; decodes the snapshot only when it changed, so
    /// the big value is copied once per generation per worker, not per request.
    fn refresh_snapshot(&self, router: &mut Router, now_ms: u64) {
        let published = host::shared_data(GENERATION_KEY).map_or(0, |bytes| decode_generation(&bytes));
        if published != self.generation.get() {
            self.generation.set(published);
            self.metrics.snapshot_generation.set(published);
            self.metrics.snapshot_decodes.increment();
            report_vm_memory(self.metrics.vm_memory_bytes);
            match host::shared_data(SNAPSHOT_KEY).map(|bytes| Snapshot::decode(&bytes)) {
                Some(Ok(snapshot)) => router.apply_snapshot(snapshot, &SharedLedger),
                Some(Err(err)) => {
                    self.metrics.snapshot_decode_failures.increment();
                    log::error!(
                        "infergate router: published snapshot does not decode, keeping the previous one: {err}"
                    );
                }
                None => log::warn!("infergate router: generation {published} has no snapshot data"),
            }
        }
        if let Some(snapshot) = router.snapshot() {
            self.metrics.snapshot_age_ms.set(now_ms.saturating_sub(snapshot.created_at_ms));
        }
    }

    fn pool_metrics(&self, pool: &str) -> Option<PoolMetrics> {
        let mut pools = self.pools.try_borrow_mut().ok()?;
        // Defined once per pool; later requests only look it up, without allocating.
        if let Some(metrics) = pools.get(pool) {
            return Some(*metrics);
        }
        let metrics = PoolMetrics::define(pool);
        pools.insert(pool.to_string(), metrics);
        Some(metrics)
    }

    /// Records that `pod` holds these blocks now, here and on every other worker.
    fn share_prefix(&self, pod: Endpoint, hashes: Vec<u64>) {
        if hashes.is_empty() {
            return;
        }
        if let Ok(mut router) = self.router.try_borrow_mut() {
            router.record_prefix(pod, &hashes);
        }
        self.peers.share(PrefixRecord { pod, hashes }, host::now_unix_ms());
    }

    /// A request arrived on this worker.
    pub fn on_request(&self) {
        self.peers.join();
    }

    /// The plugin is being torn down: its queue leaves the prefix peers, and its VM's
    /// memory no longer counts.
    pub fn on_done(&self) {
        self.peers.leave();
        withdraw_vm_memory(self.metrics.vm_memory_bytes);
    }

    pub fn on_tick(&self) {
        self.peers.on_tick(host::now_unix_ms());
    }

    /// Applies the prefix records other workers queued for this one.
    pub fn drain_prefix_queue(&self, queue_id: u32) {
        if self.peers.own_queue() != Some(queue_id) {
            return;
        }
        let Ok(mut router) = self.router.try_borrow_mut() else { return };
        while let Some(bytes) = host::dequeue(queue_id) {
            match PrefixRecord::decode_all(&bytes) {
                Some(records) => records.iter().for_each(|r| router.record_prefix(r.pod, &r.hashes)),
                None => log::warn!("infergate router: dropped an undecodable prefix record"),
            }
        }
    }
}

/// Host entropy, falling back to the clock.
fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => host::now_unix_ms(),
    }
}
