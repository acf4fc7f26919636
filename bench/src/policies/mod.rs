//! The routing policies compared, each re-implemented from its published formula and
//! defaults (a peer's file names the release and the source files it follows), plus
//! infergate's own router (the code the filter ships) and an oracle.

mod dynamo_kv;
mod gie_default;
mod infergate;
mod infergate_replicas;
mod kv_event_view;
mod least_request;
mod llmd_precise;
mod oracle;
mod random;
mod round_robin;
mod sglang_cache_aware;

use infergate_core::snapshot::PodSignals;
use infergate_model_sim::engine::Engine;

pub use dynamo_kv::DynamoKv;
pub use gie_default::GieDefault;
pub use infergate::Infergate;
pub use infergate_replicas::{Exchange, InfergateReplicas};
pub use kv_event_view::{KV_EVENT_LAG_S, KvEventView};
pub use least_request::LeastRequest;
pub use llmd_precise::LlmdPrecise;
pub use oracle::Oracle;
pub use random::Random;
pub use round_robin::RoundRobin;
pub use sglang_cache_aware::SglangCacheAware;

use crate::calibration::TtftPrediction;
use crate::fleet::ScrapeView;
use crate::request::BenchRequest;

/// Everything a policy may look at when it picks. Which parts it reads is what makes it
/// realistic: the scraped view is up to one scrape interval old; `engines` is the exact state, which only
/// `oracle` may read in full. The KV-event-driven policies read only what KV events
/// tell, through a [`KvEventView`] of the engines' event logs: the prefix a pod has
/// cached (`llmd_precise`'s prefix score, `dynamo_kv`'s overlap), as computed blocks
/// and some milliseconds late. Loads a router tracks itself (`dynamo_kv`'s active
/// blocks and prefill tokens) it keeps from its own `pick`, `on_first_token` and
/// `on_finish` calls.
pub struct PickContext<'a> {
    pub id: usize,
    pub request: &'a BenchRequest,
    pub now: f64,
    pub engines: &'a [Engine],
    pub scrape: &'a ScrapeView,
    /// Requests this router sent to each pod and that have not finished.
    pub in_flight: &'a [u32],
}

pub trait Policy: Send {
    fn name(&self) -> &'static str;
    /// Whether it indexes the pods' KV events: the simulation then has the engines
    /// record them (they cost memory, so only then).
    fn reads_kv_events(&self) -> bool {
        false
    }
    /// How often its own metrics scrape runs, when it is not the agent's default
    /// ([`crate::fleet::SCRAPE_INTERVAL_S`]): the llm-d Router's is 50 ms.
    fn scrape_interval_s(&self) -> Option<f64> {
        None
    }
    /// Whether the request is served at all; a policy that sheds says no here, and the
    /// request is counted as shed (it never reaches a pod).
    fn admit(&mut self, _ctx: &PickContext<'_>) -> bool {
        true
    }
    /// The pod index for the request.
    fn pick(&mut self, ctx: &PickContext<'_>) -> usize;
    /// A new scrape of every pod is available.
    fn on_scrape(&mut self, _scrape: &ScrapeView, _now: f64) {}
    /// The pod produced the request's first token at `at` (what a proxy observes).
    fn on_first_token(&mut self, _id: usize, _pod: usize, _request: &BenchRequest, _at: f64) {}
    /// The request finished on the pod.
    fn on_finish(&mut self, _id: usize, _pod: usize) {}
    /// The TTFT predicted for each request routed so far that had its first token,
    /// beside the one observed; `None` for a policy that predicts none.
    fn ttft_predictions(&self) -> Option<&[TtftPrediction]> {
        None
    }
    /// The prompt tokens believed cached on the chosen pod, per request routed so far
    /// that had its first token; `None` for a policy that keeps no belief.
    fn prefix_beliefs(&self) -> Option<&[crate::results::Belief]> {
        None
    }
}

/// How often the llm-d Router scrapes its pods' metrics by default: 50 ms
/// (`RefreshMetricsInterval`, `pkg/epp/server/options.go`, v0.10.0).
pub const LLMD_SCRAPE_INTERVAL_S: f64 = 0.05;

/// The names, in report order. `gie_lora` runs only on the LoRA workloads
/// ([`crate::workloads::Workload::runs_policy`]).
pub const POLICIES: [&str; 10] = [
    "round_robin",
    "random",
    "least_request",
    "gie_default",
    "gie_lora",
    "llmd_precise",
    "sglang_cache_aware",
    "dynamo_kv",
    "infergate",
    "oracle",
];

/// Builds a policy by name for a fleet of `pods`.
pub fn build(name: &str, pods: usize, seed: u64, fleet: &crate::fleet::FleetConfig) -> Option<Box<dyn Policy>> {
    let policy: Box<dyn Policy> = match name {
        "round_robin" => Box::new(RoundRobin::default()),
        "random" => Box::new(Random::new(seed)),
        "least_request" => Box::new(LeastRequest::new(seed)),
        "gie_default" => Box::new(GieDefault::new(pods, seed)),
        "gie_lora" => Box::new(GieDefault::with_lora_affinity(pods, seed)),
        "llmd_precise" => Box::new(LlmdPrecise::new(seed)),
        "sglang_cache_aware" => Box::new(SglangCacheAware::new(pods)),
        "dynamo_kv" => Box::new(DynamoKv::new(seed)),
        "infergate" => Box::new(Infergate::new(fleet, seed)),
        "oracle" => Box::new(Oracle),
        _ => return None,
    };
    Some(policy)
}

/// Builds a policy by name as part 2 runs it behind Envoy with `workers` worker
/// threads: Envoy's `round_robin` keeps a cursor per worker ([`RoundRobin::envoy`]);
/// the others are as in [`build`] (`least_request` reads the hosts' active-request
/// counts, which Envoy's workers share; `random` has no state).
pub fn build_behind_envoy(
    name: &str,
    pods: usize,
    seed: u64,
    fleet: &crate::fleet::FleetConfig,
    workers: usize,
) -> Option<Box<dyn Policy>> {
    match name {
        "round_robin" => Some(Box::new(RoundRobin::envoy(workers, seed))),
        _ => build(name, pods, seed, fleet),
    }
}

/// Builds a policy by name as part 2 runs it: behind Envoy with `workers` worker
/// threads ([`build_behind_envoy`]), and infergate behind `replicas` gateway replicas
/// ([`InfergateReplicas`]) whose agent pushes loads every `load_exchange_s`.
pub fn build_behind_replicas(
    name: &str,
    pods: usize,
    seed: u64,
    fleet: &crate::fleet::FleetConfig,
    (workers, replicas, load_exchange_s): (usize, usize, f64),
) -> Option<Box<dyn Policy>> {
    match name {
        "infergate" if replicas > 1 => {
            let policy = InfergateReplicas::new(fleet, seed, replicas).with_load_exchange(Some(load_exchange_s));
            Some(Box::new(policy))
        }
        _ => build_behind_envoy(name, pods, seed, fleet, workers),
    }
}

/// A prompt's engine block hashes, computed once per block size: the pods of a fleet
/// share theirs, and a long prompt's hashing is most of a KV-aware policy's work.
#[derive(Default)]
pub(crate) struct HashedOnce {
    block_size: u32,
    hashes: Vec<u64>,
    done: bool,
}

impl HashedOnce {
    pub(crate) fn get(&mut self, prompt: &[u8], adapter: Option<&str>, block_size: u32) -> &[u64] {
        if !self.done || self.block_size != block_size {
            self.hashes = infergate_model_sim::engine::block_hashes(prompt, adapter, block_size);
            self.block_size = block_size;
            self.done = true;
        }
        &self.hashes
    }
}

/// Index of the highest value, ties broken at random.
pub(crate) fn argmax(values: &[f64], rng: &mut fastrand::Rng) -> usize {
    let best = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let ties: Vec<usize> = values.iter().enumerate().filter(|(_, v)| **v >= best).map(|(i, _)| i).collect();
    ties.get(rng.usize(..ties.len().max(1))).copied().unwrap_or(0)
}

/// Min-max queue score of the GIE family: `(max − q) / (max − min)`, 1 when all equal.
pub(crate) fn min_max_lower_better(values: &[f64]) -> Vec<f64> {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    values.iter().map(|v| if max > min { (max - v) / (max - min) } else { 1.0 }).collect()
}

/// The scraped signals of pod `i`, or idle defaults before the first scrape. The
/// baselines read an unknown signal as 0, as the peers' data stores start every metric.
pub(crate) fn scraped(scrape: &ScrapeView, i: usize) -> PodSignals {
    scrape.signals.get(i).cloned().flatten().unwrap_or_default()
}

#[cfg(test)]
mod tests;
