//! The picker's state: core's router, its in-flight ledger and the snapshot they use,
//! behind one lock held only for a decision, a first answer, a release or a snapshot
//! adoption; and the counters `/metrics` shows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use infergate_core::ApiError;
use infergate_core::config::{DisaggMode, PrefixSettings, RoutingConfig};
use infergate_core::endpoint::Endpoint;
use infergate_core::prefix::{PrefixChain, PrefixRecord};
use infergate_core::replicas::{ReplicaDigest, ReplicaLoad};
use infergate_core::request::InferenceRequest;
use infergate_core::router::{LoadLedger, LocalLedger, PrefillLeg, Router};
use infergate_core::snapshot::Snapshot;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::replicas::{Outbox, own_load};

/// What the operator chose for this picker, beside the routing config.
#[derive(Debug, Clone, Copy)]
pub struct PickerSettings {
    /// Larger bodies get a 413.
    pub max_body_bytes: u64,
    /// Route as soon as `model` and the hashed prompt bytes are in.
    pub early_decision: bool,
    /// Add `x-infergate-decision` to the request headers sent upstream.
    pub explain: bool,
}

/// The picker's counters, registered for `/metrics`.
#[derive(Default)]
pub struct Stats {
    pub decisions: Counter,
    pub rejected: Counter,
    pub routed_early: Counter,
    /// Bodies found invalid after an early decision, answered 400 by the picker.
    pub early_refused: Counter,
    /// Bodies routed early whose shape the scanner does not follow: the engine judged.
    pub early_unverified: Counter,
    pub full_parses: Counter,
    pub snapshots_accepted: Counter,
    pub snapshots_refused: Counter,
    /// Prefix records received from the other pickers, and sent to them.
    pub peer_records_received: Counter,
    pub peer_records_sent: Counter,
    /// Load pushes between snapshots adopted.
    pub peer_loads_adopted: Counter,
    pub streams_open: Gauge,
}

impl Stats {
    pub fn register(&self, registry: &mut Registry) {
        let counters = [
            ("infergate_epp_decisions", "Requests routed", &self.decisions),
            ("infergate_epp_rejected", "Requests refused with an OpenAI-style error", &self.rejected),
            ("infergate_epp_routed_early", "Requests routed before their body ended", &self.routed_early),
            ("infergate_epp_early_refused", "Bodies found invalid after an early decision", &self.early_refused),
            ("infergate_epp_early_unverified", "Bodies routed early that the engine checked", &self.early_unverified),
            ("infergate_epp_full_parses", "Bodies parsed whole by the serde parser", &self.full_parses),
            ("infergate_epp_snapshots_accepted", "Snapshot pushes adopted", &self.snapshots_accepted),
            ("infergate_epp_snapshots_refused", "Snapshot pushes refused", &self.snapshots_refused),
            (
                "infergate_epp_peer_records_received",
                "Prefix records from the other pickers",
                &self.peer_records_received,
            ),
            (
                "infergate_epp_peer_records_sent",
                "Prefix records passed on to the other pickers",
                &self.peer_records_sent,
            ),
            (
                "infergate_epp_peer_loads_adopted",
                "The other pickers' load, pushed between snapshots",
                &self.peer_loads_adopted,
            ),
        ];
        for (name, help, counter) in counters {
            registry.register(name, help, counter.clone());
        }
        registry.register("infergate_epp_streams_open", "ext_proc streams open", self.streams_open.clone());
    }
}

/// Why a snapshot push was refused.
#[derive(Debug)]
pub enum PushRefusal {
    /// It does not decode or validate (400).
    Invalid(String),
    /// Its sequence is not newer than the newest adopted (409): a replay, or a second agent.
    Stale { sequence: u64, newest: u64 },
}

struct State {
    router: Router,
    ledger: LocalLedger,
    newest: Option<u64>,
    /// This picker's decisions for the other pickers, with several.
    outbox: Outbox,
    /// The newest snapshot's pods, whose load the answers to pushes report.
    pods: Vec<Endpoint>,
}

impl State {
    /// `pod` is about to hold `chain`'s prompt: the other pickers are told.
    fn announce(&mut self, pod: Endpoint, chain: &PrefixChain) {
        self.outbox.push(PrefixRecord::of_chain(pod, chain), now_ms());
    }
}

pub struct Picker {
    state: Mutex<State>,
    pub settings: PickerSettings,
    pub stats: Stats,
    ready: AtomicBool,
    /// Told to stop: no longer ready, and no longer taking new streams.
    draining: AtomicBool,
}

/// What a routed request remembers until its stream ends.
#[derive(Debug)]
pub struct Routed {
    /// `x-gateway-destination-endpoint`: best first, then the retry targets.
    pub endpoints: String,
    pub pool: String,
    pub model: String,
    pub explanation: Option<String>,
    counted_on: Endpoint,
    prefix: PrefixChain,
    /// Counted as pending prefill on `counted_on` until the first answer.
    pending_prefill_tokens: Option<u64>,
    /// A split request's prefill pod, for `x-prefiller-host-port`: llm-d's routing
    /// sidecar on the decode pod runs the prefill leg.
    pub prefiller: Option<Endpoint>,
    /// The prefill leg, counted on its pod until the decode pod answers (the sidecar
    /// runs the leg before the decode) or the request ends.
    prefill: Option<PrefillLeg>,
}

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Picker {
    pub fn new(routing: RoutingConfig, settings: PickerSettings, seed: u64) -> Self {
        let state = State {
            router: Router::new(routing, seed),
            ledger: LocalLedger::default(),
            newest: None,
            outbox: Outbox::default(),
            pods: Vec::new(),
        };
        Self {
            state: Mutex::new(state),
            settings,
            stats: Stats::default(),
            ready: AtomicBool::new(false),
            draining: AtomicBool::new(false),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere cannot leave the router half-updated: every update is a
        // single call into it. Keep serving.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A snapshot has been adopted and the picker is not draining: it routes on live
    /// signals.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed) && self.accepting()
    }

    /// Whether the picker takes new streams: until it is told to drain.
    pub fn accepting(&self) -> bool {
        !self.draining.load(Ordering::Relaxed)
    }

    /// Stops taking new streams (its health says so); the open ones are served to their end.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// How prompts are hashed for prefix matching.
    pub fn prefix_settings(&self) -> PrefixSettings {
        self.state().router.config().settings.prefix
    }

    /// Adopts a pushed snapshot if it decodes, validates and is newer than the last.
    /// With `replicated` (the agent pushes several pickers), the other pickers' prefix
    /// records in it are adopted and the answer is this picker's digest for them.
    pub fn push_snapshot(&self, body: &[u8], replicated: bool) -> Result<(u64, Option<ReplicaDigest>), PushRefusal> {
        let mut snapshot = Snapshot::decode(body).map_err(|e| {
            self.stats.snapshots_refused.inc();
            PushRefusal::Invalid(e.to_string())
        })?;
        let sequence = snapshot.sequence;
        let mut state = self.state();
        if let Some(newest) = state.newest.filter(|&newest| sequence <= newest) {
            self.stats.snapshots_refused.inc();
            return Err(PushRefusal::Stale { sequence, newest });
        }
        state.newest = Some(sequence);
        let peer_records = std::mem::take(&mut snapshot.peers.records);
        state.pods = snapshot.pools.iter().flat_map(|pool| &pool.pods).map(|pod| pod.address).collect();
        let State { router, ledger, outbox, pods, .. } = &mut *state;
        router.apply_snapshot(snapshot, ledger);
        self.ready.store(true, Ordering::Relaxed);
        self.stats.snapshots_accepted.inc();
        if !replicated {
            return Ok((sequence, None));
        }
        for record in &peer_records {
            // Another host's adapter loads would be timed by its clock: never counted.
            router.record_peer(&PrefixRecord { adapter_load: None, ..record.clone() });
        }
        self.stats.peer_records_received.inc_by(peer_records.len() as u64);
        let (records, dropped) = outbox.drain(now_ms());
        if dropped > 0 {
            tracing::warn!(dropped, "prefix records over the digest's bound were not passed on");
        }
        self.stats.peer_records_sent.inc_by(records.len() as u64);
        let digest = ReplicaDigest { records, load: own_load(ledger, pods), replicas: 0, index: None };
        Ok((sequence, Some(digest)))
    }

    /// Adopts the other pickers' load, pushed between snapshots, and answers with this
    /// picker's own.
    pub fn exchange_load(&self, body: &[u8]) -> Result<ReplicaLoad, String> {
        let others = ReplicaLoad::decode(body).map_err(|e| e.to_string())?;
        let mut state = self.state();
        state.router.adopt_peer_load(&others.load, now_ms());
        self.stats.peer_loads_adopted.inc();
        Ok(ReplicaLoad { load: own_load(&state.ledger, &state.pods) })
    }

    /// Chooses the pods for `request` (among `subset`, if the proxy gave one) and
    /// counts it in flight on the first.
    pub fn route(&self, request: &InferenceRequest, subset: Option<&[Endpoint]>) -> Result<Routed, ApiError> {
        let mut state = self.state();
        let State { router, ledger, .. } = &mut *state;
        let mut decision = router.route_within(request, now_ms(), ledger, subset)?;
        self.stats.decisions.inc();
        // An endpoint picker chooses pods; it cannot send a prefill leg itself. Only
        // llm-d's sidecar (`mode: sidecar`) can run a split: otherwise the decode pod
        // serves the request whole.
        let sidecar = router
            .config()
            .pool(&decision.pool)
            .and_then(|pool| pool.disaggregation.as_ref())
            .is_some_and(|d| d.mode == DisaggMode::Sidecar);
        if !sidecar && let Some(leg) = decision.prefill.take() {
            router.prefill_leg_done(&leg, ledger);
        }
        state.announce(decision.chosen.endpoint, &decision.prefix);
        if let Some(leg) = &decision.prefill {
            state.announce(leg.endpoint(), &decision.prefix);
        }
        tracing::debug!(decision = %decision.explain(), "routed");
        Ok(Routed {
            endpoints: decision.endpoint_header(),
            explanation: self.settings.explain.then(|| decision.explain()),
            counted_on: decision.chosen.endpoint,
            pending_prefill_tokens: Some(decision.pending_prefill_tokens),
            prefiller: decision.prefill.as_ref().map(PrefillLeg::endpoint),
            prefill: decision.prefill,
            prefix: decision.prefix,
            pool: decision.pool,
            model: decision.model,
        })
    }

    /// The pod answered (its response headers): its prefill is done; a pod other
    /// than the chosen one (a retry) holds the prompt's blocks now.
    pub fn first_answer(&self, routed: &mut Routed, served_by: Option<Endpoint>) {
        let Some(tokens) = routed.pending_prefill_tokens.take() else { return };
        let mut state = self.state();
        let State { router, ledger, .. } = &mut *state;
        router.prefill_done(routed.counted_on, tokens, ledger);
        if let Some(leg) = routed.prefill.take() {
            router.prefill_leg_done(&leg, ledger);
        }
        if let Some(pod) = served_by.filter(|pod| *pod != routed.counted_on) {
            router.record_prefix(pod, &routed.prefix);
            state.announce(pod, &routed.prefix);
        }
    }

    /// The request is over, answered or not: its in-flight count goes.
    pub fn finish(&self, routed: Routed) {
        let mut state = self.state();
        let State { router, ledger, .. } = &mut *state;
        router.release(routed.counted_on, routed.pending_prefill_tokens.unwrap_or(0), ledger);
        if let Some(leg) = &routed.prefill {
            router.prefill_leg_done(leg, ledger);
        }
    }

    /// The requests this picker has in flight on `pod`.
    pub fn in_flight(&self, pod: Endpoint) -> u32 {
        self.state().ledger.in_flight(pod)
    }

    /// The `GET /v1/models` body.
    pub fn model_list(&self) -> Vec<u8> {
        self.state().router.model_list_body(now_ms() / 1000)
    }
}
