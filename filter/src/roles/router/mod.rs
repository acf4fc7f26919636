//! The router role, on the main listener: per-worker state shared by its streams (the
//! core router, the snapshot generation it decoded, its metrics and prefix peers).

mod flow;
pub(crate) mod ledger;
mod metrics;
mod pd_body;
pub(crate) mod peers;
mod request;
mod split;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use infergate_core::config::{PrefixSettings, TenantSource};
use infergate_core::endpoint::Endpoint;
use infergate_core::filter_config::RouterRole;
use infergate_core::prefix::{PrefixChain, PrefixRecord};
use infergate_core::router::{PEER_LOAD_MAX_AGE_MS, Router};
use infergate_core::snapshot::Snapshot;
use infergate_core::wire::shared_data::{GENERATION, SNAPSHOT};

use crate::host::Host;
use crate::host::events::{RootEvents, StreamEvents};
use crate::roles::front::FrontStream;
use crate::roles::front::intake::reply_error;
use crate::shared::{generation, peer_load, recent_prefixes};
use flow::FlowGate;
use ledger::SharedLedger;
use metrics::{FlowMetrics, PoolMetrics, RouterMetrics};
use peers::{FLUSH_PERIOD_MS, PrefixPeers};
use request::{RoutedSlot, RouterRequest};

pub struct RouterShared {
    host: Rc<dyn Host>,
    router: RefCell<Router>,
    /// The snapshot generation this worker last decoded.
    generation: Cell<u64>,
    /// The generation of the other replicas' pushed load this worker last read.
    peer_load_generation: Cell<u64>,
    max_body_bytes: u64,
    early_decision: bool,
    explain: bool,
    /// Where each request's tenant is read; unset, flow control's `tenant_header`.
    tenant: Option<TenantSource>,
    /// The pools' Envoy clusters not named `pool-<name>` (`RouterRole::pool_clusters`).
    pool_clusters: BTreeMap<String, String>,
    metrics: RouterMetrics,
    pools: RefCell<HashMap<String, Rc<PoolMetrics>>>,
    peers: PrefixPeers,
    /// Requests this worker has routed, to sample one in N.
    routed: Cell<u64>,
    /// The gateway queue's requests this worker holds.
    flow: FlowGate,
    /// The root's tick is on: prefix records wait to be sent, or requests are held.
    ticking: Cell<bool>,
    /// Prefill legs the tick sent for split requests it released from the gateway
    /// queue, by call token: each one's stream and routing (`split`).
    released_legs: RefCell<BTreeMap<u32, (u32, RoutedSlot)>>,
}

impl RouterShared {
    pub fn new(host: Rc<dyn Host>, role: RouterRole) -> Self {
        log::info!(
            "infergate router: {} pools, {} models, body limit {} bytes, scoring {:?}",
            role.routing.pools.len(),
            role.routing.models.len(),
            role.max_body_bytes,
            role.routing.settings.scoring,
        );
        Self {
            router: RefCell::new(Router::new(role.routing, random_u64(&*host))),
            generation: Cell::new(0),
            peer_load_generation: Cell::new(0),
            max_body_bytes: role.max_body_bytes,
            early_decision: role.early_decision,
            explain: role.explain,
            tenant: role.tenant,
            pool_clusters: role.pool_clusters,
            metrics: RouterMetrics::define(&host),
            pools: RefCell::new(HashMap::new()),
            peers: PrefixPeers::new(&host, &role.vm_id, random_u64(&*host)),
            routed: Cell::new(0),
            flow: FlowGate::new((random_u64(&*host) >> 32) as u32, FlowMetrics::define(&host)),
            ticking: Cell::new(false),
            released_legs: RefCell::new(BTreeMap::new()),
            host,
        }
    }

    fn ledger(&self) -> SharedLedger<'_> {
        SharedLedger::new(&*self.host)
    }

    /// How prompts are hashed, under the active routing config.
    fn prefix_settings(&self) -> PrefixSettings {
        self.router.try_borrow().map_or_else(|_| PrefixSettings::default(), |router| router.config().settings.prefix)
    }

    /// Reads the small generation key; decodes the snapshot only when it changed, so
    /// the big value is copied once per generation per worker, not per request. Before
    /// it, adopts the other replicas' load if the agent pushed it since (the same
    /// pattern: a small generation per request, the push when it moved).
    fn refresh_snapshot(&self, router: &mut Router, now_ms: u64) {
        // The push first: a snapshot adopted next counts the others as it says, and its
        // baseline must not be built on an older view. A push too old to count on is
        // left for the snapshot's view.
        if let Some(pushed) = peer_load::read_unless(&*self.host, self.peer_load_generation.get()) {
            self.peer_load_generation.set(pushed.generation);
            if now_ms.saturating_sub(pushed.pushed_at_ms) <= PEER_LOAD_MAX_AGE_MS {
                router.adopt_peer_load(&pushed.load, pushed.pushed_at_ms);
            }
        }
        let published = generation::read(&*self.host, GENERATION);
        if published != self.generation.get() {
            self.generation.set(published);
            self.metrics.snapshot_generation.set(published);
            self.metrics.snapshot_decodes.increment();
            self.metrics.vm_memory.report(&*self.host);
            match self.host.shared_value(SNAPSHOT).map(|bytes| Snapshot::decode(&bytes)) {
                Some(Ok(snapshot)) => {
                    router.apply_snapshot(snapshot, &self.ledger());
                    self.report_cache_truth(router, now_ms);
                }
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

    /// Each pool's pods' found ÷ believed prefix cache (`router::CacheTruth`), × 1000.
    fn report_cache_truth(&self, router: &Router, now_ms: u64) {
        let Some(snapshot) = router.snapshot() else { return };
        for pool in &snapshot.pools {
            let pods = pool.pods.iter().map(|p| p.address);
            if let Some(ratio) = router.cache_truth().found_per_believed(pods, now_ms) {
                if let Some(metrics) = self.pool_metrics(&pool.name) {
                    metrics.prefix_found_per_believed_milli.set((ratio * 1000.0) as u64);
                }
            }
        }
    }

    /// Numbers this worker's requests: 0, 1, 2, ...
    fn next_request_number(&self) -> u64 {
        let n = self.routed.get();
        self.routed.set(n.wrapping_add(1));
        n
    }

    fn pool_metrics(&self, pool: &str) -> Option<Rc<PoolMetrics>> {
        let mut pools = self.pools.try_borrow_mut().ok()?;
        // Defined once per pool; later requests only look it up, without allocating.
        if let Some(metrics) = pools.get(pool) {
            return Some(Rc::clone(metrics));
        }
        let metrics = Rc::new(PoolMetrics::define(&self.host, pool));
        pools.insert(pool.to_string(), Rc::clone(&metrics));
        Some(metrics)
    }

    /// Records that `pod` holds these blocks now, here and on every other worker.
    fn share_prefix(&self, pod: Endpoint, prefix: PrefixChain) {
        if prefix.keys.is_empty() {
            return;
        }
        if let Ok(mut router) = self.router.try_borrow_mut() {
            router.record_prefix(pod, &prefix);
        }
        self.announce_claim(PrefixRecord::of_chain(pod, &prefix));
    }

    /// Tells the other workers and replicas that `record.pod` is about to hold these
    /// blocks, and the other workers that it loads this adapter: the claim this
    /// worker's router made at its decision.
    fn announce_claim(&self, record: PrefixRecord) {
        if record.hashes.is_empty() && record.adapter_load.is_none() {
            return;
        }
        if self.peers.share(record, self.host.now_unix_ms()) {
            self.keep_ticking();
        }
    }

    /// Starts the root's tick, if it is not on.
    fn keep_ticking(&self) {
        if !self.ticking.replace(true) {
            self.host.tick_every_ms(FLUSH_PERIOD_MS);
        }
    }

    /// Applies the prefix records sent before this worker joined the prefix peers: its
    /// replica's other workers' and the other replicas' ([`recent_prefixes`]).
    fn apply_recent(&self) {
        let records = recent_prefixes::read(&*self.host);
        if records.is_empty() {
            return;
        }
        if let Ok(mut router) = self.router.try_borrow_mut() {
            records.iter().for_each(|r| router.record_peer(r));
            log::debug!("infergate router: applied {} recent prefix records at joining", records.len());
        }
    }

    /// Applies the prefix records other workers queued for this one.
    fn drain_prefix_queue(&self, queue_id: u32) {
        if self.peers.own_queue() != Some(queue_id) {
            return;
        }
        let Ok(mut router) = self.router.try_borrow_mut() else { return };
        while let Some(bytes) = self.host.dequeue(queue_id) {
            match PrefixRecord::decode_all(&bytes) {
                Some(records) => records.iter().for_each(|r| router.record_peer(r)),
                None => log::warn!("infergate router: dropped an undecodable prefix record"),
            }
        }
    }
}

impl RootEvents for Rc<RouterShared> {
    fn on_queue_ready(&mut self, queue: u32) {
        self.drain_prefix_queue(queue);
    }

    fn on_tick(&mut self) {
        // Released requests' prefix claims go out in this tick's batch.
        self.release_held();
        self.peers.on_tick(self.host.now_unix_ms());
        // Stops until a batch of prefix records or a held request needs it again.
        if !self.flow.holds_any() && self.ticking.replace(false) {
            self.host.tick_every_ms(0);
        }
    }

    /// A prefill leg the tick sent for a released request is answered.
    fn on_http_call_response(&mut self, token: u32, num_headers: usize, body_size: usize) {
        self.on_released_leg_answer(token, num_headers, body_size);
    }

    /// The plugin is being torn down: its held requests are answered 503 (retry), those
    /// waiting for a prefill leg a tick sent go on whole, its queue leaves the prefix
    /// peers, and its VM's memory no longer counts.
    fn on_done(&mut self) {
        self.abandon_released_legs();
        for context_id in self.flow.drain(&*self.host) {
            if self.host.set_effective_context(context_id).is_ok() {
                reply_error(&*self.host, &infergate_core::ApiError::gateway_busy());
            }
        }
        self.peers.leave();
        self.metrics.vm_memory.withdraw();
    }

    /// A request arrived on this worker: its queue joins the prefix peers, once, and
    /// the records sent before then are applied.
    fn new_stream(&self, context_id: u32) -> Box<dyn StreamEvents> {
        if self.peers.join() {
            self.apply_recent();
        }
        Box::new(FrontStream::new(RouterRequest::new(Rc::clone(self), context_id)))
    }
}

/// Host entropy, falling back to the clock.
fn random_u64(host: &dyn Host) -> u64 {
    let mut bytes = [0u8; 8];
    match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => host.now_unix_ms(),
    }
}

#[cfg(test)]
mod early_tests;
#[cfg(test)]
mod flow_tests;
#[cfg(test)]
mod host_calls_tests;
#[cfg(test)]
mod identity_tests;
#[cfg(test)]
mod split_tests;
#[cfg(test)]
mod tests;
