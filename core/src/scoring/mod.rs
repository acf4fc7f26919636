//! Ranks a pool's pods for one request.
//!
//! Two modes share the same candidates. `predicted-ttft` (the default) gives each pod
//! a cost in milliseconds, the time to first token it would give this request, and the
//! cheapest wins. `weighted` gives each pod a score in [0, 1] per signal and ranks by
//! the weighted sum, as the Gateway API Inference Extension does. In both, pods above
//! the KV threshold are skipped unless all are, and ties are broken at random.

mod conversation_affinity;
mod kv_cache;
mod lora_affinity;
mod normalize;
mod predicted_ttft;
mod prefill_work;
mod prefix_affinity;
mod prefix_cache;
mod queue_depth;
mod rank;
mod replica_share;
mod running_requests;

use crate::config::{CostDefaults, PodRole, Profile, Weights};
use crate::endpoint::Endpoint;
pub use conversation_affinity::keep_conversation;
pub use kv_cache::over_threshold;
pub use predicted_ttft::{TtftBreakdown, predicted_ttft};
pub use prefill_work::prefill_work_tokens;
pub use prefix_affinity::keep_with_owner;
pub use rank::rank_top;
pub use replica_share::{
    BURST_SHARE_PREFILLS, OTHER_SHARE_PREFILLS, OTHER_SHARE_PREFILLS_PUSHED, OtherShares, ReplicaPlace,
    prefer_own_share,
};

/// A pod's LoRA state for the requested adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdapterState {
    /// The request needs no adapter.
    NotNeeded,
    /// The adapter serves running requests: resident, nothing to load.
    Running,
    /// Requests for the adapter are waiting: it is being loaded, or about to be.
    Waiting,
    /// Not resident, but a slot is free (or holds an idle adapter): one load.
    FreeSlot,
    /// Not resident and every slot serves running requests, which the gateway keeps
    /// feeding, or is claimed by an adapter whose requests wait to load: no slot frees
    /// until one of their adapters' traffic stops.
    Blocked,
    /// Not resident and every slot serves running requests, but one serves a copy
    /// being drained (`router::adapter_drain`): a slot frees when its requests finish.
    Freeing,
    /// Not resident, runs on another pod, and the pool has no slot to spare: a copy
    /// here takes the slot another adapter will need.
    Duplicate,
    /// Running, but this copy is being drained for an adapter with no slot: the
    /// request belongs on another copy.
    Surplus,
    /// The pod's adapter lists are stale or missing.
    Unknown,
}

impl AdapterState {
    /// Whether sending the request makes the pod load its adapter: it does not run
    /// there, and is not known to be loading (a blocked adapter may be listed waiting;
    /// recording it again changes nothing).
    pub fn starts_a_load(self) -> bool {
        matches!(self, Self::FreeSlot | Self::Duplicate | Self::Freeing | Self::Blocked)
    }
}

/// Optional per-pod rates the agent learned from the pod's own counters.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LearnedRates {
    pub prefill_tokens_per_s: Option<f64>,
    pub decode_step_ms: Option<f64>,
    pub mean_prompt_tokens: Option<f64>,
    pub request_rate_per_s: Option<f64>,
    pub slot_hold_ms: Option<f64>,
}

/// What the router believes about one pod at decision time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub endpoint: Endpoint,
    /// What the pod does in a disaggregated pool (`both` elsewhere).
    pub role: PodRole,
    /// Waiting requests, plus what was sent to the pod since its last scrape; or, when
    /// its signals are stale, its in-flight count.
    pub waiting: f64,
    pub running: f64,
    /// Uncached prompt tokens this gateway sent that have not had their first token.
    pub pending_prefill_tokens: f64,
    /// KV-cache use in 0..=1; `None` when stale or missing.
    pub kv_cache_usage: Option<f64>,
    /// Free KV-cache tokens at the scrape, when its use is fresh and its size known.
    pub kv_free_tokens: Option<f64>,
    pub adapter: AdapterState,
    /// Leading prompt blocks this pod probably holds, and the prompt's total.
    pub matched_blocks: usize,
    pub total_blocks: usize,
    /// Prompt blocks the pod's prefix cache can take before it evicts blocks a later
    /// request matched, as this router's index counts them (`f64::INFINITY` when unknown).
    pub prefix_room_blocks: f64,
    /// The share of the pod's prefix capacity, in 0..=1, that blocks a later request
    /// matched hold, as this router's index counts them (0 when unknown).
    pub prefix_held_share: f64,
    pub learned: LearnedRates,
    /// False until the pod has reported metrics at least once.
    pub has_metrics: bool,
    /// How much slower than predicted its pool's first tokens come, learned from what
    /// the proxy observed (1 until observed): its time-based costs are multiplied by it.
    pub ttft_factor: f64,
}

/// The request's side of the cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestShape {
    pub prompt_tokens: f64,
    /// Characters per prefix block, to turn matched blocks into tokens.
    pub tokens_per_block: f64,
    pub output_tokens: f64,
    /// The longest prefix match among the candidates, in blocks: who owns the prefix.
    pub best_matched_blocks: usize,
}

impl RequestShape {
    /// The prompt tokens `matched_blocks` hold: all but the last token at most, which
    /// an engine always computes.
    pub fn cached_tokens(&self, matched_blocks: usize) -> f64 {
        (matched_blocks as f64 * self.tokens_per_block).min((self.prompt_tokens - 1.0).max(0.0))
    }
}

/// One weighted-mode scorer: a score in 0..=1 per candidate, higher is better.
type Scorer = fn(&[Candidate], &mut [f64]);

/// The weighted mode's scorers, in the order of [`Weights::named`].
const SCORERS: [Scorer; 5] =
    [kv_cache::score, queue_depth::score, running_requests::score, lora_affinity::score, prefix_cache::score];

/// `total[i] = Σ weight_s · clamp(score_s[i], 0, 1)`; NaN scores count as 0. Written
/// into `totals`, one signal at a time through `column`: both are buffers the caller
/// keeps between decisions. A signal of weight 0 is not computed.
pub fn weighted_totals(candidates: &[Candidate], weights: &Weights, column: &mut Vec<f64>, totals: &mut Vec<f64>) {
    totals.clear();
    totals.resize(candidates.len(), 0.0);
    column.clear();
    column.resize(candidates.len(), 0.0);
    for (scorer, (_, weight)) in SCORERS.iter().zip(weights.named()) {
        if weight == 0.0 {
            continue;
        }
        scorer(candidates, column);
        for (total, score) in totals.iter_mut().zip(column.iter()) {
            let clamped = if score.is_nan() { 0.0 } else { score.clamp(0.0, 1.0) };
            *total += weight * clamped;
        }
    }
}

/// Negated predicted costs, so that higher is better as in the weighted mode; written
/// into `totals`, with each cost's parts in `breakdowns`: buffers the caller keeps
/// between decisions.
pub fn ttft_totals(
    candidates: &[Candidate],
    shape: &RequestShape,
    defaults: &CostDefaults,
    profile: Profile,
    breakdowns: &mut Vec<TtftBreakdown>,
    totals: &mut Vec<f64>,
) {
    breakdowns.clear();
    breakdowns.extend(candidates.iter().map(|c| predicted_ttft(c, shape, defaults, profile)));
    totals.clear();
    totals.extend(breakdowns.iter().map(|b| -b.total_ms));
}

#[cfg(test)]
pub(crate) fn candidate(port: u16, waiting: f64, running: f64, kv: Option<f64>) -> Candidate {
    Candidate {
        role: PodRole::Both,
        endpoint: Endpoint::new(std::net::SocketAddr::from(([10, 0, 0, 1], port))),
        waiting,
        running,
        pending_prefill_tokens: 0.0,
        kv_cache_usage: kv,
        kv_free_tokens: None,
        adapter: AdapterState::NotNeeded,
        matched_blocks: 0,
        total_blocks: 0,
        prefix_room_blocks: f64::INFINITY,
        prefix_held_share: 0.0,
        learned: LearnedRates::default(),
        has_metrics: true,
        ttft_factor: 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weighted_totals(candidates: &[Candidate], weights: &Weights) -> Vec<f64> {
        let mut totals = Vec::new();
        super::weighted_totals(candidates, weights, &mut Vec::new(), &mut totals);
        totals
    }

    #[test]
    fn the_least_loaded_pod_has_the_highest_total() {
        let pods =
            [candidate(1, 5.0, 8.0, Some(0.9)), candidate(2, 0.0, 1.0, Some(0.1)), candidate(3, 2.0, 4.0, Some(0.5))];
        let totals = weighted_totals(&pods, &Weights::default());
        assert!(totals[1] > totals[2] && totals[2] > totals[0], "{totals:?}");
    }

    #[test]
    fn zero_weight_disables_a_scorer() {
        let pods = [candidate(1, 0.0, 0.0, Some(0.9)), candidate(2, 0.0, 0.0, Some(0.1))];
        let only_queue = Weights {
            queue_depth: 1.0,
            ..Weights { kv_cache: 0.0, queue_depth: 0.0, running_requests: 0.0, lora_affinity: 0.0, prefix_cache: 0.0 }
        };
        let totals = weighted_totals(&pods, &only_queue);
        assert_eq!(totals[0], totals[1]);
    }

    #[test]
    fn nan_signals_count_as_worst() {
        let pods = [candidate(1, 0.0, 0.0, Some(f64::NAN)), candidate(2, 0.0, 0.0, Some(0.5))];
        let totals = weighted_totals(&pods, &Weights::default());
        assert!(totals[1] > totals[0], "{totals:?}");
    }

    #[test]
    fn the_weighted_mode_prefers_the_prefix_holder_at_equal_load() {
        let mut pods = [candidate(1, 1.0, 1.0, Some(0.3)), candidate(2, 1.0, 1.0, Some(0.3))];
        pods[0].total_blocks = 10;
        pods[1].total_blocks = 10;
        pods[1].matched_blocks = 8;
        let totals = weighted_totals(&pods, &Weights::default());
        assert!(totals[1] > totals[0]);
    }
}
