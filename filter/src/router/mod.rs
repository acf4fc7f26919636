//! The router role: per-worker state shared by its HTTP contexts.

mod http;

use std::cell::{Cell, RefCell};

use infergate_core::filter_config::{GENERATION_KEY, RouterRole, SNAPSHOT_KEY};
use infergate_core::router::Router;
use infergate_core::snapshot::Snapshot;

use crate::host;
use crate::metrics::RouterMetrics;
use crate::singleton::decode_generation;
pub use http::RouterHttp;

pub struct RouterShared {
    router: RefCell<Router>,
    /// The snapshot generation this worker last decoded.
    generation: Cell<u64>,
    max_body_bytes: u64,
    explain: bool,
    metrics: RouterMetrics,
}

impl RouterShared {
    pub fn new(role: RouterRole) -> Self {
        let metrics = RouterMetrics::define();
        log::info!(
            "infergate router: {} pools, {} models, body limit {} bytes",
            role.routing.pools.len(),
            role.routing.models.len(),
            role.max_body_bytes
        );
        Self {
            router: RefCell::new(Router::new(role.routing, random_seed())),
            generation: Cell::new(0),
            max_body_bytes: role.max_body_bytes,
            explain: role.explain,
            metrics,
        }
    }

    /// Reads the small generation key; decodes the snapshot only when it changed, so
    /// the big value is copied once per generation per worker, not per request.
    fn refresh_snapshot(&self, router: &mut Router, now_ms: u64) {
        let published =
            host::shared_data(GENERATION_KEY).map_or(0, |bytes| decode_generation(&bytes));
        if published != self.generation.get() {
            self.generation.set(published);
            self.metrics.snapshot_generation.set(published);
            match host::shared_data(SNAPSHOT_KEY).map(|bytes| Snapshot::decode(&bytes)) {
                Some(Ok(snapshot)) => router.apply_snapshot(snapshot),
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
            self.metrics
                .snapshot_age_ms
                .set(now_ms.saturating_sub(snapshot.created_at_ms));
        }
    }
}

/// Seeds tie-breaking from the host's entropy, falling back to the clock.
fn random_seed() -> u64 {
    let mut bytes = [0u8; 8];
    match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => host::now_unix_ms(),
    }
}
