//! What a P/D routing policy answers (a decode pod, and a prefill pod when it splits),
//! what it may look at, and the policies compared: infergate's router and the peers,
//! on a fleet with roles, beside the aggregated policies of `crate::policies` on a
//! fleet without.

use infergate_core::config::{PodRole, SplitPolicy};
use infergate_model_sim::engine::Engine;

use super::fleet::{Layout, Link, fleet_config};
use super::infergate_pd::InfergatePd;
use super::peers::{AibrixPd, DynamoPd, LlmdPd, SglangPd, VllmProxy};
use crate::fleet::{FleetConfig, ScrapeView};
use crate::policies::{self, PickContext, Policy};
use crate::request::BenchRequest;

/// Everything a policy may read when it routes. As in `crate::policies`, which parts
/// it reads is what makes it faithful: the scrape is up to 100 ms old; `engines` is
/// the exact state, read only where a peer indexes its engines' KV events (the prefix
/// a pod holds). Loads a router tracks itself it keeps from its own callbacks.
pub struct PdContext<'a> {
    pub id: usize,
    pub request: &'a BenchRequest,
    pub now: f64,
    pub engines: &'a [Engine],
    pub scrape: &'a ScrapeView,
    /// Per pod, the requests routed to it that it has not finished: a decode (or
    /// whole) request until its last token, a prefill leg until it returns.
    pub in_flight: &'a [u32],
    pub roles: &'a [PodRole],
}

/// Where a request goes: its decode pod (the whole request when `prefill` is `None`),
/// and the prefill pod of a split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PdChoice {
    pub decode: usize,
    pub prefill: Option<usize>,
}

impl PdChoice {
    pub fn whole(pod: usize) -> Self {
        Self { decode: pod, prefill: None }
    }
}

pub trait PdPolicy: Send {
    fn name(&self) -> String;
    /// Whether it indexes the pods' KV events (see [`Policy::reads_kv_events`]).
    fn reads_kv_events(&self) -> bool {
        false
    }
    fn route(&mut self, ctx: &PdContext<'_>) -> PdChoice;
    /// A new scrape of every pod; `engines` for the counters a peer's gateway derives
    /// rates from.
    fn on_scrape(&mut self, _scrape: &ScrapeView, _engines: &[Engine], _now: f64) {}
    /// The prefill leg of request `id` returned from `pod` (its one token came back).
    fn on_prefill_done(&mut self, _id: usize, _pod: usize, _at: f64) {}
    /// The client's first token, from the decode pod `pod`.
    fn on_first_token(&mut self, _id: usize, _pod: usize, _request: &BenchRequest, _at: f64) {}
    /// The request's last token, on `pod`.
    fn on_finish(&mut self, _id: usize, _pod: usize, _at: f64) {}
}

/// An aggregated policy of `crate::policies`: every request whole on the pod it picks.
pub struct Aggregated {
    inner: Box<dyn Policy>,
}

impl Aggregated {
    pub fn new(inner: Box<dyn Policy>) -> Self {
        Self { inner }
    }
}

impl PdPolicy for Aggregated {
    fn name(&self) -> String {
        format!("agg/{}", self.inner.name())
    }

    fn reads_kv_events(&self) -> bool {
        self.inner.reads_kv_events()
    }

    fn route(&mut self, ctx: &PdContext<'_>) -> PdChoice {
        let pick = PickContext {
            id: ctx.id,
            request: ctx.request,
            now: ctx.now,
            engines: ctx.engines,
            scrape: ctx.scrape,
            in_flight: ctx.in_flight,
        };
        PdChoice::whole(self.inner.pick(&pick))
    }

    fn on_scrape(&mut self, scrape: &ScrapeView, _engines: &[Engine], now: f64) {
        self.inner.on_scrape(scrape, now);
    }

    fn on_first_token(&mut self, id: usize, pod: usize, request: &BenchRequest, at: f64) {
        self.inner.on_first_token(id, pod, request, at);
    }

    fn on_finish(&mut self, id: usize, pod: usize, _at: f64) {
        self.inner.on_finish(id, pod);
    }
}

/// The policies compared, each with the fleet it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// A `crate::policies` policy by name, on the fleet without roles.
    Aggregated(&'static str),
    /// infergate's router with the pool's `disaggregation` and this `split`.
    Infergate(SplitPolicy),
    Llmd,
    VllmProxy,
    Dynamo,
    Aibrix,
    Sglang,
}

/// The aggregated policies run: infergate and the peers that lead the aggregated
/// benchmark (BENCHMARKS.md).
pub const AGGREGATED: [&str; 5] = ["infergate", "llmd_precise", "dynamo_kv", "gie_default", "sglang_cache_aware"];

impl PolicyKind {
    /// Every policy, in report order: aggregated first, then P/D.
    pub fn all() -> Vec<PolicyKind> {
        let mut all: Vec<PolicyKind> = AGGREGATED.iter().map(|n| PolicyKind::Aggregated(n)).collect();
        all.extend([
            PolicyKind::Infergate(SplitPolicy::Predicted),
            PolicyKind::Infergate(SplitPolicy::Always),
            PolicyKind::Infergate(SplitPolicy::Never),
            PolicyKind::Llmd,
            PolicyKind::VllmProxy,
            PolicyKind::Dynamo,
            PolicyKind::Aibrix,
            PolicyKind::Sglang,
        ]);
        all
    }

    pub fn name(self) -> String {
        match self {
            PolicyKind::Aggregated(name) => format!("agg/{name}"),
            PolicyKind::Infergate(SplitPolicy::Predicted) => "pd/infergate".into(),
            PolicyKind::Infergate(SplitPolicy::Always) => "pd/infergate-always".into(),
            PolicyKind::Infergate(SplitPolicy::Never) => "pd/infergate-never".into(),
            PolicyKind::Llmd => "pd/llmd".into(),
            PolicyKind::VllmProxy => "pd/vllm_proxy".into(),
            PolicyKind::Dynamo => "pd/dynamo".into(),
            PolicyKind::Aibrix => "pd/aibrix".into(),
            PolicyKind::Sglang => "pd/sglang".into(),
        }
    }

    /// Whether it runs on the fleet with roles.
    pub fn disaggregated(self) -> bool {
        !matches!(self, PolicyKind::Aggregated(_))
    }

    /// The fleet it runs on: `layout`'s roles for a P/D policy, none for an aggregated
    /// one; infergate's pool gets the `disaggregation` section with its `split`.
    pub fn fleet(self, pods: usize, layout: Layout, link: Link) -> PdFleet {
        let layout = if self.disaggregated() { layout } else { Layout::Aggregated };
        let split = match self {
            PolicyKind::Infergate(split) => Some(split),
            _ => None,
        };
        PdFleet { config: fleet_config(pods, layout, link, split), roles: layout.roles(pods), link }
    }

    /// The policy, for `fleet` (made by [`Self::fleet`]).
    pub fn build(self, fleet: &PdFleet, seed: u64) -> Option<Box<dyn PdPolicy>> {
        let pods = fleet.roles.len();
        let policy: Box<dyn PdPolicy> = match self {
            PolicyKind::Aggregated(name) => {
                Box::new(Aggregated::new(policies::build(name, pods, seed, &fleet.config)?))
            }
            PolicyKind::Infergate(split) => Box::new(InfergatePd::new(&fleet.config, split, seed)),
            PolicyKind::Llmd => Box::new(LlmdPd::new(pods, seed)),
            PolicyKind::VllmProxy => Box::new(VllmProxy::default()),
            PolicyKind::Dynamo => Box::new(DynamoPd::new(pods, seed)),
            PolicyKind::Aibrix => Box::new(AibrixPd::new(&fleet.roles, seed)),
            PolicyKind::Sglang => Box::new(SglangPd::new(&fleet.roles)),
        };
        Some(policy)
    }
}

/// A fleet as one policy sees it: the routing config the agent's snapshots carry, each
/// pod's role, and the link between pods.
pub struct PdFleet {
    pub config: FleetConfig,
    pub roles: Vec<PodRole>,
    pub link: Link,
}

/// The pods of `roles` that can take a split's prefill leg.
pub(crate) fn prefill_pods(roles: &[PodRole]) -> Vec<usize> {
    roles.iter().enumerate().filter(|(_, r)| r.prefills()).map(|(i, _)| i).collect()
}

/// The pods of `roles` that can take a decode (or a whole request).
pub(crate) fn decode_pods(roles: &[PodRole]) -> Vec<usize> {
    roles.iter().enumerate().filter(|(_, r)| r.decodes()).map(|(i, _)| i).collect()
}
