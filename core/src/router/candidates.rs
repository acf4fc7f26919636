//! Builds the candidates of a pool for one request: each pod's load, with fresh signals
//! or on the gateway's own in-flight count when they are stale; its adapter state; and
//! how much of the prompt it probably holds.

use std::collections::HashMap;

use super::DecisionBasis;
use super::adapter_drain::AdapterDrain;
use super::adapter_loads::AdapterLoads;
use super::ledger::{LoadLedger, PodLoad};
use super::tables::PodTables;
use crate::config::{LearnedSpeeds, PodRole, PoolConfig, RoutingSettings};
use crate::endpoint::Endpoint;
use crate::prefix::{PrefixChain, PrefixIndex};
use crate::scoring::{AdapterState, Candidate, LearnedRates};
use crate::snapshot::{PodSignals, PodState, Snapshot};

pub(super) struct Inputs<'a> {
    pub pool: &'a PoolConfig,
    pub snapshot: Option<&'a Snapshot>,
    pub ledger: &'a dyn LoadLedger,
    /// The other gateway replicas' load, as of the snapshot (empty with one replica).
    pub peer_load: &'a HashMap<Endpoint, PodLoad>,
    /// Gateway replicas, this one included (1 when alone).
    pub replicas: f64,
    /// While the other replicas' load is pushed: what they probably sent since the last
    /// push, to their own shares of the pods.
    pub burst: Option<BurstGuess<'a>>,
    /// This replica's pending prefill tokens per pod when the snapshot was adopted.
    pub pending_baseline: &'a HashMap<Endpoint, u64>,
    /// In-flight counts when the snapshot was adopted: what its scrape already saw.
    pub baseline: &'a HashMap<Endpoint, u32>,
    /// This router's split requests whose prefill leg is out, per decode pod: in flight
    /// there, but not queued for a prefill (`Router::away`).
    pub away: &'a HashMap<Endpoint, u32>,
    pub prefix: &'a PrefixIndex,
    /// Each pod's prefix capacity in blocks, from its KV size (`Router::capacity`).
    pub capacity: &'a HashMap<Endpoint, u64>,
    /// The prompt's prefix keys for this model.
    pub chain: &'a PrefixChain,
    pub adapter: Option<&'a str>,
    /// The adapter copies being drained (`adapter_drain`).
    pub drain: &'a AdapterDrain,
    /// The adapter loads this gateway's routers started that the snapshot cannot show
    /// (`adapter_loads`).
    pub loads: &'a AdapterLoads,
    pub settings: &'a RoutingSettings,
    /// The pool's learned correction of its predictions (`calibration`).
    pub ttft_factor: f64,
    pub now_ms: u64,
    /// Only these pods may be chosen (the endpoint picker protocol's subset hint).
    pub subset: Option<&'a [Endpoint]>,
}

impl Inputs<'_> {
    fn allowed(&self, pod: Endpoint) -> bool {
        self.subset.is_none_or(|subset| subset.contains(&pod))
    }

    /// What `pod`'s prefix cache holds of prefixes a later request matched (old
    /// prompts' tails evict for free): the blocks it can take before it evicts any of
    /// them, and the share of its capacity they fill. Unknown (infinite room, no share)
    /// until a snapshot gives the pod's KV size.
    fn prefix_space(&self, pod: Endpoint) -> (f64, f64) {
        let reused = self.prefix.reused_blocks_of(pod);
        match self.capacity.get(&pod) {
            Some(&capacity) if capacity > 0 => {
                (capacity.saturating_sub(reused) as f64, (reused as f64 / capacity as f64).min(1.0))
            }
            _ => (f64::INFINITY, 0.0),
        }
    }

    /// This replica's live load on `pod` (one shared-data read inside Envoy), and the
    /// load of every replica: the others' as of the snapshot added.
    fn loads(&self, pod: Endpoint) -> (PodLoad, PodLoad) {
        let own = self.ledger.load(pod);
        let mut all = own.and(self.peer_load.get(&pod).copied().unwrap_or_default());
        if let Some(burst) = &self.burst {
            if burst.shares.contains(&self.pool.name, pod) {
                all.in_flight = all.in_flight.saturating_add(burst.per_pod.in_flight);
                all.pending_prefill_tokens =
                    all.pending_prefill_tokens.saturating_add(burst.per_pod.pending_prefill_tokens);
            }
        }
        (own, all)
    }
}

/// What the other replicas probably sent since the last load push, which no exchange
/// can show yet: a burst that reaches this replica reaches them too, and each sends to
/// its own share of the pods as much as this one sent to its own
/// (`scoring::replica_share`).
pub(super) struct BurstGuess<'a> {
    pub shares: &'a crate::scoring::OtherShares,
    /// What this replica sent to each of its own pods since the push, on average.
    pub per_pod: PodLoad,
}

impl<'a> BurstGuess<'a> {
    /// From what this router `sent` each pod since the last push; `None` when it sent
    /// nothing, or has no share of `pool` (alone, or not told its place).
    pub(super) fn of(
        sent: &HashMap<Endpoint, PodLoad>,
        shares: &'a crate::scoring::OtherShares,
        pool: &PoolConfig,
        snapshot: Option<&Snapshot>,
    ) -> Option<Self> {
        if sent.is_empty() || shares.is_empty() {
            return None;
        }
        let pods: Vec<Endpoint> = match snapshot.and_then(|s| s.pool(&pool.name)) {
            Some(state) => state.pods.iter().filter(|p| p.ready).map(|p| p.address).collect(),
            None => pool.endpoints.clone(),
        };
        let own: Vec<PodLoad> = pods
            .iter()
            .filter(|pod| !shares.contains(&pool.name, **pod))
            .map(|pod| sent.get(pod).copied().unwrap_or_default())
            .collect();
        let n = own.len() as u64;
        if n == 0 || own.iter().all(|l| l.in_flight == 0) {
            return None;
        }
        let in_flight: u64 = own.iter().map(|l| u64::from(l.in_flight)).sum();
        let pending: u64 = own.iter().map(|l| l.pending_prefill_tokens).sum();
        let per_pod = PodLoad {
            in_flight: u32::try_from(in_flight.div_ceil(n)).unwrap_or(u32::MAX),
            pending_prefill_tokens: pending / n,
        };
        Some(Self { shares, per_pod })
    }
}

/// Fills `candidates` (and whether each is `fresh`) for one request; returns what the
/// decision is based on.
pub(super) fn build(inputs: &Inputs<'_>, tables: &mut PodTables) -> DecisionBasis {
    let PodTables { candidates, fresh, endpoints, matched_keys, .. } = tables;
    candidates.clear();
    fresh.clear();
    match inputs.snapshot.and_then(|s| s.pool(&inputs.pool.name)) {
        Some(state) => {
            // Only pods that could be chosen count: were the one pod that serves the
            // adapter down, the others would be tried rather than none.
            let choosable = |pod: &&PodState| pod.ready && inputs.allowed(pod.address);
            let adapters_served = inputs.adapter.is_some()
                && state.pods.iter().filter(choosable).any(|pod| serves_adapters(pod, inputs) == Some(true));
            let adapter_listed =
                state.pods.iter().filter(choosable).any(|pod| lists_adapter(pod, inputs) == Some(true));
            let usable = state.pods.iter().filter(|pod| {
                // While some pod of the pool reports LoRA slots, an adapter request does
                // not go to a pod whose fresh metrics report none: an engine started
                // without LoRA (vLLM without `--enable-lora`) answers it 404. Likewise,
                // while some pod's model list has the adapter, not to a pod whose list
                // lacks it (started without that adapter).
                pod.ready
                    && inputs.allowed(pod.address)
                    && !(adapters_served && serves_adapters(pod, inputs) == Some(false))
                    && !(adapter_listed && lists_adapter(pod, inputs) == Some(false))
            });
            for (candidate, is_fresh) in usable.map(|pod| from_pod(pod, inputs)) {
                candidates.push(candidate);
                fresh.push(is_fresh);
            }
        }
        // No snapshot yet, or the pool is new: the static endpoints, on load alone.
        None => {
            let usable = inputs.pool.endpoints.iter().filter(|&&endpoint| inputs.allowed(endpoint));
            candidates.extend(usable.map(|&endpoint| unobserved(endpoint, inputs, true)));
            fresh.resize(candidates.len(), false);
        }
    }
    // How much of the prompt each pod holds, searched for all pods at once.
    endpoints.clear();
    endpoints.extend(candidates.iter().map(|c| c.endpoint));
    inputs.prefix.matched_keys_each(endpoints, &inputs.chain.keys, matched_keys);
    for (c, &keys) in candidates.iter_mut().zip(matched_keys.iter()) {
        c.matched_blocks = inputs.chain.blocks_through(keys);
    }
    if inputs.settings.speeds == LearnedSpeeds::Pool {
        pool_speeds(candidates);
    }
    let fresh_count = fresh.iter().filter(|f| **f).count();
    let basis = if fresh_count == candidates.len() && fresh_count > 0 {
        DecisionBasis::Signals
    } else if fresh_count > 0 {
        DecisionBasis::Mixed
    } else {
        DecisionBasis::LoadOnly
    };
    if basis == DecisionBasis::Mixed {
        for (c, _) in candidates.iter_mut().zip(fresh.iter()).filter(|(_, fresh)| !**fresh) {
            // While other pods report, one whose signals went stale is suspect (hung,
            // frozen, restarted with an empty cache): neither its prefix credit nor the
            // speeds learned from its metrics pull requests to it, and it ranks like a
            // pod that has not reported yet, on its in-flight count, usable but not
            // preferred.
            c.matched_blocks = 0;
            c.learned = LearnedRates::default();
            c.has_metrics = false;
        }
    }
    basis
}

/// Whether `pod` serves LoRA adapters, as its fresh metrics say (vLLM reports its slots
/// only when started with LoRA); unknown without fresh metrics.
fn serves_adapters(pod: &PodState, inputs: &Inputs<'_>) -> Option<bool> {
    let signals = pod.signals.as_ref()?;
    age_ok(pod, inputs.settings.signal_max_age_ms, inputs.now_ms).then_some(signals.max_loras.is_some_and(|m| m > 0))
}

/// Whether `pod`'s model list, as the agent last read it, has the request's adapter;
/// unknown for a base model, or without a list read within `adapter_max_age_ms`.
fn lists_adapter(pod: &PodState, inputs: &Inputs<'_>) -> Option<bool> {
    let adapter = inputs.adapter?;
    let signals = pod.signals.as_ref()?;
    age_ok(pod, inputs.settings.adapter_max_age_ms, inputs.now_ms).then(|| signals.serves_adapter(adapter)).flatten()
}

fn age_ok(pod: &PodState, max_age_ms: u64, now_ms: u64) -> bool {
    pod.scraped_at_ms.is_some_and(|at| now_ms.saturating_sub(at) <= max_age_ms)
}

fn from_pod(pod: &PodState, inputs: &Inputs<'_>) -> (Candidate, bool) {
    let settings = inputs.settings;
    let Some(signals) = &pod.signals else {
        return (unobserved(pod.address, inputs, false), false);
    };
    let (own, load) = inputs.loads(pod.address);
    // A split request prefilling elsewhere will join this pod's running batch with its
    // prompt computed: it counts as running, not as waiting for a prefill.
    let away = inputs.away.get(&pod.address).copied().unwrap_or(0).min(load.in_flight);
    let in_flight = load.in_flight - away;
    let fresh = age_ok(pod, settings.signal_max_age_ms, inputs.now_ms);
    let (prefix_room_blocks, prefix_held_share) = inputs.prefix_space(pod.address);
    let mut candidate = Candidate {
        endpoint: pod.address,
        // A role label the agent read wins; otherwise the pool's static lists.
        role: if pod.role == PodRole::Both { inputs.pool.role_of(pod.address) } else { pod.role },
        waiting: f64::from(in_flight),
        running: f64::from(load.in_flight),
        pending_prefill_tokens: load.pending_prefill_tokens as f64,
        kv_cache_usage: None,
        kv_free_tokens: None,
        adapter: AdapterState::Unknown,
        // Filled for all candidates at once (`build`).
        matched_blocks: 0,
        total_blocks: inputs.chain.blocks as usize,
        prefix_room_blocks,
        prefix_held_share,
        // Learned speeds change slowly: they stay usable whatever their age.
        learned: LearnedRates {
            prefill_tokens_per_s: signals.prefill_tokens_per_s,
            decode_step_ms: signals.decode_step_ms,
            mean_prompt_tokens: signals.mean_prompt_tokens,
            request_rate_per_s: signals.request_rate_per_s,
            slot_hold_ms: signals.slot_hold_ms,
        },
        has_metrics: true,
        ttft_factor: inputs.ttft_factor,
    };
    if fresh {
        let sent_since_scrape = in_flight.saturating_sub(inputs.baseline.get(&pod.address).copied().unwrap_or(0));
        let unseen = f64::from(sent_since_scrape) * inputs.replicas;
        (candidate.waiting, candidate.running) = fresh_load(signals, in_flight, unseen);
        candidate.running += f64::from(away);
        // The other replicas, routing on the same snapshot, probably sent as much
        // prefill here since it as this one did (see `fresh_load`).
        let own_since =
            own.pending_prefill_tokens.saturating_sub(inputs.pending_baseline.get(&pod.address).copied().unwrap_or(0));
        candidate.pending_prefill_tokens += own_since as f64 * (inputs.replicas - 1.0);
        candidate.kv_cache_usage = signals.kv_cache_usage;
        candidate.kv_free_tokens = signals
            .kv_cache_usage
            .zip(signals.num_gpu_blocks.zip(signals.block_size))
            .map(|(usage, (blocks, size))| (1.0 - usage.clamp(0.0, 1.0)) * blocks as f64 * f64::from(size));
    }
    candidate.adapter = match inputs.adapter {
        None => AdapterState::NotNeeded,
        Some(_) if !age_ok(pod, settings.adapter_max_age_ms, inputs.now_ms) => AdapterState::Unknown,
        Some(adapter) => match adapter_state(signals, adapter, inputs.loads, pod.address) {
            AdapterState::Running if inputs.drain.is_surplus(&inputs.pool.name, pod.address, adapter) => {
                AdapterState::Surplus
            }
            AdapterState::Blocked if inputs.drain.is_freeing(&inputs.pool.name, pod.address) => AdapterState::Freeing,
            AdapterState::FreeSlot if inputs.drain.is_duplicate(&inputs.pool.name, pod.address, adapter) => {
                AdapterState::Duplicate
            }
            state => state,
        },
    };
    (candidate, fresh)
}

/// Gives every pod that reported metrics the median of the pool's learned prefill rates,
/// decode steps and mean prompts ([`LearnedSpeeds::Pool`]); a pod not learned yet gets
/// them too. The pods of a pool serve one workload, so its mean prompt is one figure;
/// each pod's own is taken over the few requests of one window and, with heavy-tailed
/// prompt lengths, swings by two orders of magnitude from one window to the next.
fn pool_speeds(candidates: &mut [Candidate]) {
    let prefill = median(candidates.iter().filter_map(|c| c.learned.prefill_tokens_per_s));
    let step = median(candidates.iter().filter_map(|c| c.learned.decode_step_ms));
    let prompt = median(candidates.iter().filter_map(|c| c.learned.mean_prompt_tokens));
    for c in candidates.iter_mut().filter(|c| c.has_metrics) {
        c.learned.prefill_tokens_per_s = prefill.or(c.learned.prefill_tokens_per_s);
        c.learned.decode_step_ms = step.or(c.learned.decode_step_ms);
        c.learned.mean_prompt_tokens = prompt.or(c.learned.mean_prompt_tokens);
    }
}

/// The median of the finite positive values (the mean of the middle two when even).
fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut sorted: Vec<f64> = values.filter(|v| v.is_finite() && *v > 0.0).collect();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    match (sorted.len() % 2, sorted.get(middle), middle.checked_sub(1).and_then(|i| sorted.get(i))) {
        (1, Some(&m), _) => Some(m),
        (_, Some(&high), Some(&low)) => Some((low + high) / 2.0),
        _ => None,
    }
}

/// Waiting and running from a fresh scrape and the gateways' in-flight count. What the
/// gateways sent since the scrape (`sent_since_scrape`) is not in it yet: it counts as waiting.
/// With several replicas, each routes on the same snapshot and cannot see the others'
/// requests until the next one: like this replica, each probably sent its requests
/// since the snapshot to the pods that looked best, so the count is this replica's
/// times the replicas (exact when their views are the same). A pod never has
/// less work than the gateway knows it sent and not finished, so a pod whose metrics
/// stopped moving, or that holds requests it never admits, still looks as loaded as its
/// in-flight count. A signal the engine does not export is estimated from the same
/// count: what is not known to run waits, what is not known to wait runs; with neither,
/// the pod ranks on its in-flight count as a pod without metrics does.
fn fresh_load(signals: &PodSignals, in_flight: u32, sent_since_scrape: f64) -> (f64, f64) {
    let in_flight = f64::from(in_flight);
    match (signals.waiting, signals.running) {
        (None, None) => (in_flight, in_flight),
        (waiting, Some(running)) => ((waiting.unwrap_or(0.0) + sent_since_scrape).max(in_flight - running), running),
        (Some(waiting), None) => {
            let running = (in_flight - waiting).max(0.0);
            ((waiting + sent_since_scrape).max(in_flight - running), running)
        }
    }
}

/// A pod ranked on in-flight counts alone. One that has never reported metrics while
/// others have is penalized; with no snapshot at all, every pod is alike.
fn unobserved(endpoint: Endpoint, inputs: &Inputs<'_>, no_snapshot: bool) -> Candidate {
    let (_, load) = inputs.loads(endpoint);
    let in_flight = f64::from(load.in_flight);
    let (prefix_room_blocks, prefix_held_share) = inputs.prefix_space(endpoint);
    Candidate {
        endpoint,
        role: inputs.pool.role_of(endpoint),
        waiting: in_flight,
        running: in_flight,
        pending_prefill_tokens: load.pending_prefill_tokens as f64,
        kv_cache_usage: None,
        kv_free_tokens: None,
        adapter: if inputs.adapter.is_some() { AdapterState::Unknown } else { AdapterState::NotNeeded },
        matched_blocks: 0,
        total_blocks: inputs.chain.blocks as usize,
        prefix_room_blocks,
        prefix_held_share,
        learned: LearnedRates::default(),
        has_metrics: no_snapshot,
        ttft_factor: inputs.ttft_factor,
    }
}

/// vLLM lists the adapters of running and of waiting requests; resident but idle
/// adapters are not listed (evicting one costs no more than loading into an empty
/// slot), so a free slot is counted from the lists and `max_lora`.
/// When running requests use every slot, no adapter can be evicted until one finishes:
/// an adapter that only waiting requests use is then blocked too, not about to load
/// (part 2's slowest 1% were such requests, priced at 25 ms and served after 4-8 s).
/// An adapter that only waiting requests use claims a slot too: it was asked for
/// first and loads first, so when the running adapters and those claims fill every
/// slot, a new adapter waits for one of them to drain, as if running requests held
/// them all. (This was priced as one eviction, 100 ms; part 2's slowest requests after
/// 2026-12-03 were such: an adapter sent to a pod's last free slot, another sent there
/// 30-70 ms later, on a snapshot that showed the first one waiting, served 3.4 s later.)
/// A waiting request for an adapter that also runs claims nothing new. An adapter this
/// router sent the pod that the snapshot cannot show yet (`loads`) counts as listed
/// waiting.
fn adapter_state(signals: &PodSignals, adapter: &str, loads: &AdapterLoads, pod: Endpoint) -> AdapterState {
    let running = &signals.running_adapters;
    let max = signals.max_loras.map(|m| m as usize);
    if running.iter().any(|a| a == adapter) {
        AdapterState::Running
    } else if max.is_some_and(|max| running.len() >= max) {
        AdapterState::Blocked
    } else if signals.waiting_adapters.iter().any(|a| a == adapter) || loads.on(pod).any(|a| a == adapter) {
        AdapterState::Waiting
    } else {
        let sent_claims = loads.on(pod).filter(|a| !signals.lists_adapter(a)).count();
        match max {
            Some(max) if signals.claimed_lora_slots() + sent_claims < max => AdapterState::FreeSlot,
            Some(_) => AdapterState::Blocked,
            None => AdapterState::Unknown,
        }
    }
}
