//! The per-worker routing state and the decision for one request: model → pool and
//! adapter, the pool's candidates, the KV filter, the ranking, and the bookkeeping that
//! follows (in-flight counts, prefix ownership).

mod adapter_drain;
mod adapter_loads;
mod admission;
mod cache_truth;
mod calibration;
mod candidates;
pub mod chars_per_token;
mod decision;
pub mod disagg;
mod ledger;
pub mod model_list;
mod tables;

use std::collections::HashMap;

use crate::api_error::ApiError;
use crate::config::{AdmissionSettings, Criticality, FlowControlSettings, RoutingConfig, ScoringMode};
use crate::endpoint::Endpoint;
use crate::prefix::{AdapterLoad, PrefixChain, PrefixIndex, PrefixRecord};
use crate::replicas::PeerLoad;
use crate::request::InferenceRequest;
use crate::scoring::{
    BURST_SHARE_PREFILLS, Candidate, OTHER_SHARE_PREFILLS, OTHER_SHARE_PREFILLS_PUSHED, OtherShares, RequestShape,
    keep_conversation, keep_with_owner, over_threshold, prefer_own_share, rank_top, ttft_totals, weighted_totals,
};
use crate::snapshot::Snapshot;
use adapter_drain::AdapterDrain;
use adapter_loads::AdapterLoads;
pub use cache_truth::CacheTruth;
pub use calibration::TtftCalibration;
use candidates::BurstGuess;
pub use chars_per_token::CharsPerToken;
pub use decision::{Decision, DecisionBasis, PodReport, Routing};
pub use disagg::{PrefillLeg, SplitReason, SplitVerdict};
pub use ledger::{LoadLedger, LocalLedger, PodLoad};
use tables::PodTables;

/// The load exchange's pushes come every few milliseconds; with none for this long
/// (the agent or its exchange stopped, or an older agent), a replica routes on the
/// snapshot's view of the others again.
pub const PEER_LOAD_MAX_AGE_MS: u64 = 200;

/// Requests this close together count as one burst: the load exchange's push interval,
/// within which the replicas cannot see each other's sends.
const BURST_GAP_MS: u64 = 5;
/// Weight of each request in the burstiness mean.
const BURSTINESS_WEIGHT: f64 = 0.05;

pub struct Router {
    config: RoutingConfig,
    snapshot: Option<Snapshot>,
    /// In-flight counts when the snapshot was adopted (its scrape already saw those).
    baseline: HashMap<Endpoint, u32>,
    /// The other gateway replicas' load per pod, from the snapshot or, newer, from the
    /// agent's load exchange.
    peer_load: HashMap<Endpoint, PodLoad>,
    /// When the load exchange last brought `peer_load`, if ever.
    peer_load_pushed_at_ms: Option<u64>,
    /// Gateway replicas, this one included, from the snapshot.
    replicas: u32,
    /// What this router sent each pod since the last load push: requests and prefill.
    since_push: HashMap<Endpoint, PodLoad>,
    /// The share of this router's requests that came within a load push interval of
    /// the one before (an exponentially weighted mean), and when the last one came.
    burstiness: f64,
    last_decision_ms: Option<u64>,
    /// The pods dealt to the other replicas, from the snapshot and this replica's
    /// place among them.
    others_shares: OtherShares,
    /// The adapter copies being drained so a starved adapter gets a slot.
    adapter_drain: AdapterDrain,
    /// The adapter loads this router started that the snapshot cannot show yet.
    adapter_loads: AdapterLoads,
    /// This replica's pending prefill tokens per pod when the snapshot was adopted.
    pending_baseline: HashMap<Endpoint, u64>,
    /// Prefix capacity of each pod in hashed blocks, from its KV size.
    capacity: HashMap<Endpoint, u64>,
    /// Split requests of this router whose prefill leg is out, per decode pod: counted
    /// in flight there (they will decode there), but not in its prefill queue.
    away: HashMap<Endpoint, u32>,
    /// What this router believed each pod held, against what the pods say they found.
    cache_truth: CacheTruth,
    prefix: PrefixIndex,
    calibration: TtftCalibration,
    chars_per_token: CharsPerToken,
    rng: fastrand::Rng,
    tables: PodTables,
}

impl Router {
    /// `config` is the plugin configuration's, used until the first snapshot arrives.
    pub fn new(config: RoutingConfig, seed: u64) -> Self {
        Self {
            prefix: PrefixIndex::new(config.settings.prefix.max_owners),
            config,
            snapshot: None,
            baseline: HashMap::new(),
            peer_load: HashMap::new(),
            peer_load_pushed_at_ms: None,
            replicas: 1,
            since_push: HashMap::new(),
            burstiness: 0.0,
            last_decision_ms: None,
            others_shares: OtherShares::default(),
            adapter_drain: AdapterDrain::default(),
            adapter_loads: AdapterLoads::default(),
            pending_baseline: HashMap::new(),
            capacity: HashMap::new(),
            away: HashMap::new(),
            cache_truth: CacheTruth::default(),
            calibration: TtftCalibration::default(),
            chars_per_token: CharsPerToken::default(),
            rng: fastrand::Rng::with_seed(seed),
            tables: PodTables::default(),
        }
    }

    pub fn config(&self) -> &RoutingConfig {
        &self.config
    }

    pub fn snapshot(&self) -> Option<&Snapshot> {
        self.snapshot.as_ref()
    }

    pub fn prefix_index(&self) -> &PrefixIndex {
        &self.prefix
    }

    /// What this router believed its pods held, against what their counters say.
    pub fn cache_truth(&self) -> &CacheTruth {
        &self.cache_truth
    }

    /// The other replicas' load, pushed by the agent's load exchange at `pushed_at_ms`
    /// (between snapshots, every few milliseconds). While the last push is at most
    /// [`PEER_LOAD_MAX_AGE_MS`] old, the others' requests since the snapshot are
    /// counted as they are, not guessed from this replica's (`candidates::fresh_load`),
    /// and no replica keeps a share of the pods: each sees the others' sends within
    /// milliseconds, as one gateway's workers see each other's. Without pushes (an
    /// agent older than the exchange, or one that stopped), the snapshot's load, the
    /// guess and the shares come back.
    pub fn adopt_peer_load(&mut self, load: &[PeerLoad], pushed_at_ms: u64) {
        self.peer_load = load.iter().map(|p| (p.pod, p.load())).collect();
        self.peer_load_pushed_at_ms = Some(pushed_at_ms);
        self.since_push.clear();
    }

    /// Whether the load exchange's last push is recent enough to count on.
    fn peer_load_pushed(&self, now_ms: u64) -> bool {
        self.peer_load_pushed_at_ms.is_some_and(|at| now_ms.saturating_sub(at) <= PEER_LOAD_MAX_AGE_MS)
    }

    /// Adopts a validated snapshot: its config becomes active, each pod's current
    /// in-flight count (this replica's and the others') becomes the baseline that its
    /// scrape already reflects, and pods that left are forgotten by the prefix index.
    /// The other replicas' prefix records are not read here: a worker may skip
    /// snapshots, so the shell hands them to [`Self::record_prefix`] on every worker.
    pub fn apply_snapshot(&mut self, mut snapshot: Snapshot, ledger: &dyn LoadLedger) {
        let block_chars = f64::from(snapshot.routing.settings.prefix.block_chars.max(1));
        let fallback = u64::from(snapshot.routing.settings.prefix.default_blocks_per_pod);
        let peers = std::mem::take(&mut snapshot.peers);
        // The snapshot's view of the others is the agent's when it built it, and can be
        // older than the last load push: while pushes come, the router keeps theirs.
        if !self.peer_load_pushed(snapshot.created_at_ms) {
            self.peer_load = peers.load.iter().map(|p| (p.pod, p.load())).collect();
        }
        self.replicas = peers.replicas.max(1);
        self.others_shares = OtherShares::deal(&snapshot.pools, peers.place());
        self.adapter_drain = AdapterDrain::plan(&snapshot.pools, &snapshot.routing.models);
        self.adapter_loads.forget_scraped(&snapshot.pools);
        self.baseline.clear();
        self.pending_baseline.clear();
        let mut capacity = HashMap::new();
        for pool in &snapshot.pools {
            let chars_per_token = self.chars_per_token.ratio(&pool.name);
            for pod in &pool.pods {
                let peer_in_flight = self.peer_load.get(&pod.address).map_or(0, |l| l.in_flight);
                let own = ledger.load(pod.address);
                let away = self.away.get(&pod.address).copied().unwrap_or(0);
                let queued = own.in_flight.saturating_sub(away).saturating_add(peer_in_flight);
                self.baseline.insert(pod.address, queued);
                self.pending_baseline.insert(pod.address, own.pending_prefill_tokens);
                let kv_tokens = pod.signals.as_ref().and_then(|s| Some(s.num_gpu_blocks? * u64::from(s.block_size?)));
                let blocks =
                    kv_tokens.map_or(fallback, |tokens| ((tokens as f64 * chars_per_token) / block_chars) as u64);
                capacity.insert(pod.address, blocks.max(1));
                // What the index believes the pod holds, checked against its counters.
                if let Some(counters) =
                    pod.signals.as_ref().and_then(|s| s.prefix_cache_queries.zip(s.prefix_cache_hits))
                {
                    self.cache_truth.counted(pod.address, counters, snapshot.created_at_ms);
                }
            }
        }
        let gone: Vec<Endpoint> = self.prefix.pods().filter(|p| !capacity.contains_key(p)).copied().collect();
        for pod in gone {
            self.prefix.forget(pod);
        }
        self.cache_truth.retain(|pod| capacity.contains_key(pod));
        self.calibration.retain(|pool| snapshot.routing.pool(pool).is_some());
        self.chars_per_token.retain(|pool| snapshot.routing.pool(pool).is_some());
        self.capacity = capacity;
        self.config = snapshot.routing.clone();
        self.snapshot = Some(snapshot);
    }

    /// Chooses the ranked endpoints for a request and counts it in flight on the first.
    /// A sheddable request to a saturated pool is refused (429).
    pub fn route(
        &mut self,
        request: &InferenceRequest,
        now_ms: u64,
        ledger: &mut dyn LoadLedger,
    ) -> Result<Decision, ApiError> {
        self.route_within(request, now_ms, ledger, None)
    }

    /// As [`Self::route`], choosing only among `subset` when given: the endpoint
    /// picker protocol's subset hint. No ready pod of the pool in it is a 503.
    pub fn route_within(
        &mut self,
        request: &InferenceRequest,
        now_ms: u64,
        ledger: &mut dyn LoadLedger,
        subset: Option<&[Endpoint]>,
    ) -> Result<Decision, ApiError> {
        match self.decide(request, now_ms, ledger, None, subset)? {
            Routing::Routed(decision) => Ok(*decision),
            Routing::Hold { pool, .. } => Err(ApiError::pool_saturated(&pool, self.config.settings.retry_after_s)),
        }
    }

    /// As [`Self::route`], with the gateway queue's rule instead of shedding: a request
    /// of any band is held while its pool is saturated, or while the best pod's
    /// predicted TTFT is above its band's `hold_above_ttft_ms`. A held request is
    /// counted nowhere; the caller queues it and asks again when room may have freed.
    pub fn route_or_hold(
        &mut self,
        request: &InferenceRequest,
        now_ms: u64,
        ledger: &mut dyn LoadLedger,
        flow: &FlowControlSettings,
    ) -> Result<Routing, ApiError> {
        self.decide(request, now_ms, ledger, Some(flow), None)
    }

    fn decide(
        &mut self,
        request: &InferenceRequest,
        now_ms: u64,
        ledger: &mut dyn LoadLedger,
        flow: Option<&FlowControlSettings>,
        subset: Option<&[Endpoint]>,
    ) -> Result<Routing, ApiError> {
        let model = self.config.model(&request.model).ok_or_else(|| ApiError::model_not_found(&request.model))?;
        let pool = self.config.pool(&model.pool).ok_or_else(|| ApiError::model_not_found(&request.model))?;
        let settings = &self.config.settings;
        let adapter = model.adapter.as_deref();
        let chain = request.prompt.salted(&model.name, adapter);
        self.adapter_loads.expire(now_ms);
        let pushed = self.peer_load_pushed(now_ms);
        let tables = &mut self.tables;
        let inputs = candidates::Inputs {
            pool,
            snapshot: self.snapshot.as_ref(),
            ledger: &*ledger,
            peer_load: &self.peer_load,
            // With the others' load pushed, their sends are in `peer_load`, not guessed.
            replicas: if pushed { 1.0 } else { f64::from(self.replicas) },
            // Within a push interval the others are blind to us and we to them: what we
            // sent since the last push, they probably sent too (a burst reaches all).
            burst: pushed
                .then(|| BurstGuess::of(&self.since_push, &self.others_shares, pool, self.snapshot.as_ref()))
                .flatten(),
            pending_baseline: &self.pending_baseline,
            baseline: &self.baseline,
            away: &self.away,
            prefix: &self.prefix,
            capacity: &self.capacity,
            chain: &chain,
            adapter,
            drain: &self.adapter_drain,
            loads: &self.adapter_loads,
            settings,
            ttft_factor: self.calibration.factor(&pool.name),
            now_ms,
            subset,
        };
        let basis = candidates::build(&inputs, tables);
        let candidates = &tables.candidates;
        let band = Criticality::effective(model.criticality, request.criticality);
        let hold = |predicted_ttft_ms: Option<f64>| Routing::Hold { pool: pool.name.clone(), band, predicted_ttft_ms };
        let saturated = match flow {
            // The gateway queue takes over the engines' queueing: a pod counts as full
            // as soon as it has this many waiting.
            Some(flow) => admission::pool_saturated(
                candidates,
                &AdmissionSettings { queue_depth_threshold: flow.band(band).max_engine_waiting, ..settings.admission },
            ),
            None => band == Criticality::Sheddable && admission::pool_saturated(candidates, &settings.admission),
        };
        if saturated {
            return Ok(hold(None));
        }
        let chars_per_token = self.chars_per_token.ratio(&pool.name);
        let shape = RequestShape {
            prompt_tokens: (request.prompt_chars() as f64 / chars_per_token).ceil().max(1.0),
            tokens_per_block: f64::from(settings.prefix.block_chars) / chars_per_token,
            output_tokens: request.max_tokens.map_or(settings.cost.output_tokens, f64::from),
            best_matched_blocks: candidates.iter().map(|c| c.matched_blocks).max().unwrap_or(0),
        };
        let profile = self.config.profile_for(pool);
        match settings.scoring {
            ScoringMode::PredictedTtft => {
                ttft_totals(candidates, &shape, &settings.cost, profile, &mut tables.breakdowns, &mut tables.totals);
                keep_with_owner(candidates, &tables.breakdowns, &shape, &mut tables.totals);
                keep_conversation(candidates, &tables.breakdowns, &shape, &mut tables.totals);
                // With the others' load pushed, only a push interval is blind, not a scrape.
                let price = if pushed {
                    OTHER_SHARE_PREFILLS_PUSHED + BURST_SHARE_PREFILLS * self.burstiness
                } else {
                    OTHER_SHARE_PREFILLS
                };
                let others = (&self.others_shares, pool.name.as_str());
                prefer_own_share(candidates, &tables.breakdowns, &shape, others, (price, &mut tables.totals));
            }
            ScoringMode::Weighted => weighted_totals(
                candidates,
                &self.config.weights_for(pool),
                &mut tables.signal_column,
                &mut tables.totals,
            ),
        }
        let eligible = &mut tables.eligible;
        eligible.clear();
        // The predicted cost prices a full KV cache as the wait for room; the weighted
        // mode has no such term and skips pods above the threshold instead.
        let kv_filter = settings.scoring == ScoringMode::Weighted;
        eligible.extend(candidates.iter().map(|c| !(kv_filter && over_threshold(c, settings.kv_cache_threshold))));
        if !eligible.iter().any(|ok| *ok) {
            eligible.iter_mut().for_each(|ok| *ok = true);
        }
        // In a disaggregated pool the first stage picks the decode pod: prefill-only pods
        // are out, unless no other pod is ready.
        if pool.disaggregation.is_some() && candidates.iter().any(|c| c.role.decodes()) {
            eligible.iter_mut().zip(candidates.iter()).for_each(|(ok, c)| *ok &= c.role.decodes());
            if !eligible.iter().any(|ok| *ok) {
                eligible.iter_mut().zip(candidates.iter()).for_each(|(ok, c)| *ok = c.role.decodes());
            }
        }
        let totals = &tables.totals;
        let ranked = rank_top(totals, eligible, settings.ranked_endpoints, &mut self.rng, &mut tables.order);
        let Some(&first) = ranked.first() else {
            return Err(ApiError::no_ready_endpoint(&pool.name, settings.retry_after_s));
        };
        let report = |i: usize| {
            candidates.get(i).zip(totals.get(i)).map(|(c, &total)| PodReport::new(c, total, &shape, settings, profile))
        };
        let chosen = report(first).ok_or_else(|| ApiError::no_ready_endpoint(&pool.name, settings.retry_after_s))?;
        let runner_up = ranked.get(1).and_then(|&i| report(i));
        let spilled = shape.best_matched_blocks > chosen.matched_blocks;
        let owner = if spilled && runner_up.is_none_or(|r| r.matched_blocks < shape.best_matched_blocks) {
            best_owner(candidates, totals, shape.best_matched_blocks).and_then(report)
        } else {
            None
        };
        if let Some(limit) = flow.and_then(|f| f.band(band).hold_above_ttft_ms) {
            if chosen.ttft.ttft_ms > limit {
                return Ok(hold(Some(chosen.ttft.ttft_ms)));
            }
        }
        // The second stage, in a disaggregated pool: the prefill pod, and whether to split.
        let (split, prefill) = match &pool.disaggregation {
            None => (None, None),
            Some(disaggregation) => {
                eligible.iter_mut().zip(candidates.iter()).for_each(|(ok, c)| {
                    *ok = c.role.prefills() && c.endpoint != chosen.endpoint;
                });
                let order = &mut tables.order;
                let ranked = rank_top(totals, eligible, settings.ranked_endpoints, &mut self.rng, order);
                let best = ranked.first().and_then(|&i| report(i));
                let verdict = disagg::verdict(disaggregation, shape.prompt_tokens, &chosen, best.as_ref());
                let leg = best.filter(|_| verdict.split).map(|report| PrefillLeg {
                    decode: chosen.endpoint,
                    endpoints: ranked.iter().filter_map(|&i| candidates.get(i).map(|c| c.endpoint)).collect(),
                    pending_prefill_tokens: settings
                        .cost
                        .prefill_work_tokens(shape.prompt_tokens, report.cached_tokens)
                        .max(1.0) as u64,
                    report,
                });
                (Some(verdict), leg)
            }
        };
        let whole_prefill_tokens =
            settings.cost.prefill_work_tokens(shape.prompt_tokens, chosen.cached_tokens).max(1.0) as u64;
        // A split request's decode pod only computes the prompt's last token.
        let pending_prefill_tokens = if prefill.is_some() { 1 } else { whole_prefill_tokens };
        ledger.update(chosen.endpoint, 1, i64::try_from(pending_prefill_tokens).unwrap_or(i64::MAX));
        if let Some(leg) = &prefill {
            ledger.update(leg.endpoint(), 1, i64::try_from(leg.pending_prefill_tokens).unwrap_or(i64::MAX));
            *self.away.entry(chosen.endpoint).or_default() += 1;
        }
        if self.replicas > 1 {
            let close = self.last_decision_ms.is_some_and(|last| now_ms.saturating_sub(last) <= BURST_GAP_MS);
            self.burstiness += BURSTINESS_WEIGHT * (f64::from(u8::from(close)) - self.burstiness);
            self.last_decision_ms = Some(now_ms);
            let sent = self.since_push.entry(chosen.endpoint).or_default();
            *sent = sent.plus(1, i64::try_from(pending_prefill_tokens).unwrap_or(i64::MAX));
        }
        let decision = Decision {
            pool: pool.name.clone(),
            model: model.name.clone(),
            adapter: model.adapter.clone(),
            endpoints: ranked.iter().filter_map(|&i| candidates.get(i).map(|c| c.endpoint)).collect(),
            basis,
            scoring: settings.scoring,
            spilled,
            prefix: chain,
            pending_prefill_tokens,
            whole_prefill_tokens,
            snapshot_age_ms: self.snapshot.as_ref().map(|s| now_ms.saturating_sub(s.created_at_ms)),
            adapter_load: model
                .adapter
                .as_ref()
                .filter(|_| chosen.adapter.starts_a_load())
                .map(|adapter| AdapterLoad { adapter: adapter.clone(), sent_at_ms: now_ms }),
            chosen,
            runner_up,
            owner,
            split,
            prefill,
        };
        // The chosen pod will hold the prompt's blocks once this prefill runs, and a
        // request with the same prefix queued behind it there finds them: the claim is
        // made now, not at the first token, or every request of a prefix group that
        // arrives within one TTFT of the first misses it and starts a cold copy
        // elsewhere (which, under load, lengthens TTFT and widens that window). The
        // first token confirms the claim on every worker.
        self.cache_truth.sent(decision.chosen.endpoint, shape.prompt_tokens, decision.chosen.cached_tokens, now_ms);
        let matched_keys = decision.prefix.keys_through(decision.chosen.matched_blocks);
        self.prefix.mark_reused(decision.chosen.endpoint, &decision.prefix.keys, matched_keys);
        self.record_claim(decision.chosen.endpoint, &decision.prefix, decision.adapter_load.as_ref());
        if let Some(leg) = &decision.prefill {
            // The prefill pod computed the prompt: its cache holds it too.
            self.record_prefix(leg.endpoint(), &decision.prefix);
        }
        Ok(Routing::Routed(Box::new(decision)))
    }

    /// The request's first token came back (or it failed before one): its prefill no
    /// longer waits on the pod it was counted on.
    pub fn prefill_done(&mut self, counted_on: Endpoint, pending_prefill_tokens: u64, ledger: &mut dyn LoadLedger) {
        ledger.update(counted_on, 0, -i64::try_from(pending_prefill_tokens).unwrap_or(i64::MAX));
    }

    /// A split request is served whole on its decode pod after all (its prefill leg
    /// failed): the whole prompt's prefill, `whole_prefill_tokens`, is pending there
    /// now, in place of the one token counted; `pending` is updated to match.
    pub fn served_whole(
        &mut self,
        decode: Endpoint,
        pending: &mut Option<u64>,
        whole_prefill_tokens: u64,
        ledger: &mut dyn LoadLedger,
    ) {
        let Some(counted) = pending.as_mut() else { return };
        let more = whole_prefill_tokens.saturating_sub(*counted);
        ledger.update(decode, 0, i64::try_from(more).unwrap_or(i64::MAX));
        *counted += more;
    }

    /// A split request's prefill leg has ended, answered or not: it no longer counts on
    /// its prefill pod.
    pub fn prefill_leg_done(&mut self, leg: &PrefillLeg, ledger: &mut dyn LoadLedger) {
        ledger.update(leg.endpoint(), -1, -i64::try_from(leg.pending_prefill_tokens).unwrap_or(i64::MAX));
        // Its request now waits on (or decodes at) the decode pod.
        if let Some(away) = self.away.get_mut(&leg.decode) {
            *away = away.saturating_sub(1);
            if *away == 0 {
                self.away.remove(&leg.decode);
            }
        }
    }

    /// A streamed answer's first token came `observed_ms` after the decision that
    /// predicted `predicted_ms` for it: the pool's predictions are corrected towards
    /// what the clock said. Returns the error, `observed − predicted`, when usable.
    pub fn observe_first_token(&mut self, pool: &str, predicted_ms: f64, observed_ms: f64) -> Option<f64> {
        self.calibration.observe(pool, predicted_ms, observed_ms)
    }

    /// What has been learned of each pool's predictions.
    pub fn calibration(&self) -> &TtftCalibration {
        &self.calibration
    }

    /// An answer from `pool` reported `prompt_tokens` (its `usage`) for a prompt of
    /// `prompt_chars`: the pool's characters per token move towards it. Returns whether
    /// the answer was counted.
    pub fn observe_usage(&mut self, pool: &str, prompt_chars: usize, prompt_tokens: u64) -> bool {
        self.chars_per_token.observe(pool, prompt_chars, prompt_tokens)
    }

    /// What has been learned of each pool's characters per token.
    pub fn chars_per_token(&self) -> &CharsPerToken {
        &self.chars_per_token
    }

    /// `pod` holds the prompt of `chain` now (a retry moved its request there).
    pub fn record_prefix(&mut self, pod: Endpoint, chain: &PrefixChain) {
        self.record_keys(pod, &chain.keys, &chain.ends);
    }

    /// `pod` holds the prompt whose keys are `keys`, ending at `ends`.
    fn record_keys(&mut self, pod: Endpoint, keys: &[u64], ends: &[u32]) {
        if keys.is_empty() {
            return;
        }
        let fallback = u64::from(self.config.settings.prefix.default_blocks_per_pod);
        let capacity = self.capacity.get(&pod).copied().unwrap_or(fallback);
        self.prefix.record(pod, keys, ends, capacity);
    }

    /// Another worker's or replica's decision: the blocks its pod is about to hold, and
    /// (another worker's) the adapter load it started there, counted until a scrape of
    /// the pod lists it.
    pub fn record_peer(&mut self, record: &PrefixRecord) {
        self.record_keys(record.pod, &record.hashes, &record.ends);
        if let Some(load) = &record.adapter_load {
            self.adapter_loads.record(record.pod, &load.adapter, load.sent_at_ms);
        }
    }

    /// A decision's claim on `pod`: its blocks, and the adapter load it started.
    fn record_claim(&mut self, pod: Endpoint, chain: &PrefixChain, load: Option<&AdapterLoad>) {
        self.record_prefix(pod, chain);
        if let Some(load) = load {
            self.adapter_loads.record(pod, &load.adapter, load.sent_at_ms);
        }
    }

    /// The request sent to `pod` has finished, whatever its outcome; if it failed
    /// before any answer, its prefill tokens are still pending there and go too.
    pub fn release(&mut self, pod: Endpoint, unanswered_prefill_tokens: u64, ledger: &mut dyn LoadLedger) {
        ledger.update(pod, -1, -i64::try_from(unanswered_prefill_tokens).unwrap_or(i64::MAX));
    }

    /// The body of `GET /v1/models`: every model this gateway serves.
    pub fn model_list_body(&self, created_s: u64) -> Vec<u8> {
        model_list::body(&self.config, created_s)
    }
}

/// The candidate with `best_matched_blocks` matched and the highest total, if any.
fn best_owner(candidates: &[Candidate], totals: &[f64], best_matched_blocks: usize) -> Option<usize> {
    candidates
        .iter()
        .zip(totals)
        .enumerate()
        .filter(|(_, (c, _))| c.matched_blocks == best_matched_blocks)
        .max_by(|(_, (_, a)), (_, (_, b))| a.total_cmp(b))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests;
