//! A routing decision and its explanation.

use std::fmt::Write;

use super::disagg::{PrefillLeg, SplitVerdict};
use crate::config::{Criticality, PodRole, Profile, RoutingSettings, ScoringMode};
use crate::endpoint::Endpoint;
use crate::prefix::{AdapterLoad, PrefixChain};
use crate::scoring::{AdapterState, Candidate, RequestShape, TtftBreakdown, predicted_ttft};

/// What the ranking rested on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionBasis {
    /// Every candidate had fresh signals.
    Signals,
    /// Some candidates had fresh signals, the others were ranked on in-flight counts.
    Mixed,
    /// No fresh signals at all (no snapshot, or the agent is gone): in-flight counts only.
    LoadOnly,
}

impl DecisionBasis {
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionBasis::Signals => "signals",
            DecisionBasis::Mixed => "mixed",
            DecisionBasis::LoadOnly => "load-only",
        }
    }
}

/// One pod as the decision saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PodReport {
    pub endpoint: Endpoint,
    /// The ranking value: negated cost in ms (predicted-ttft), or the weighted score.
    pub total: f64,
    pub waiting: f64,
    pub running: f64,
    pub kv_cache_usage: Option<f64>,
    pub matched_blocks: usize,
    /// The prompt tokens the matched blocks hold (all but the last token at most).
    pub cached_tokens: f64,
    pub adapter: AdapterState,
    /// What the pod serves in a disaggregated pool (`Both` in any other).
    pub role: PodRole,
    pub ttft: TtftBreakdown,
}

impl PodReport {
    pub(super) fn new(
        c: &Candidate,
        total: f64,
        shape: &RequestShape,
        settings: &RoutingSettings,
        profile: Profile,
    ) -> Self {
        Self {
            endpoint: c.endpoint,
            total,
            waiting: c.waiting,
            running: c.running,
            kv_cache_usage: c.kv_cache_usage,
            matched_blocks: c.matched_blocks,
            cached_tokens: shape.cached_tokens(c.matched_blocks),
            adapter: c.adapter,
            role: c.role,
            ttft: predicted_ttft(c, shape, &settings.cost, profile),
        }
    }

    fn describe(&self, out: &mut String) {
        let _ = write!(
            out,
            "{} score={:.1} ttft_ms={:.1} (queue={:.1} prefill={:.1} adapter={:.1}) impact_ms={:.1} resident_ms={:.1} evict_ms={:.1} waiting={:.0} running={:.0} kv={} prefix_blocks={} adapter={:?}",
            self.endpoint,
            self.total,
            self.ttft.ttft_ms,
            self.ttft.queue_ms,
            self.ttft.prefill_ms,
            self.ttft.adapter_ms,
            self.ttft.impact_ms,
            self.ttft.resident_ms,
            self.ttft.evict_ms,
            self.waiting,
            self.running,
            self.kv_cache_usage.map_or_else(|| "?".to_string(), |kv| format!("{kv:.2}")),
            self.matched_blocks,
            self.adapter,
        );
    }
}

/// Where a request goes, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub pool: String,
    pub model: String,
    /// The LoRA adapter the model maps to, if any.
    pub adapter: Option<String>,
    /// Best first; the rest are retry targets in order.
    pub endpoints: Vec<Endpoint>,
    pub basis: DecisionBasis,
    pub scoring: ScoringMode,
    /// Some other pod held a longer prefix, but this one was predicted faster.
    pub spilled: bool,
    /// The prompt's prefix keys, claimed for the chosen pod.
    pub prefix: PrefixChain,
    /// Uncached prompt tokens counted as pending prefill on the chosen pod until
    /// [`super::Router::prefill_done`].
    pub pending_prefill_tokens: u64,
    /// The prefill tokens the chosen pod would compute were the request served whole:
    /// `pending_prefill_tokens` unless it is split.
    pub whole_prefill_tokens: u64,
    /// How old the snapshot the decision used was (from the agent's clock to this
    /// gateway's), or `None` without one.
    pub snapshot_age_ms: Option<u64>,
    /// The adapter load the decision started on the chosen pod (its adapter lists did
    /// not show the adapter), for the other workers of this Envoy to count.
    pub adapter_load: Option<AdapterLoad>,
    pub chosen: PodReport,
    pub runner_up: Option<PodReport>,
    /// When the request spilled: of the pods holding the longest prefix match, the one
    /// with the highest score, unless the runner-up holds it, so that the explanation
    /// says why the owner lost.
    pub owner: Option<PodReport>,
    /// In a disaggregated pool: whether the request is split, and why.
    pub split: Option<SplitVerdict>,
    /// The prefill leg of a split request; the decode pod is `chosen`.
    pub prefill: Option<PrefillLeg>,
}

impl Decision {
    /// The `x-gateway-destination-endpoint` value: `a,b,c`.
    pub fn endpoint_header(&self) -> String {
        let mut out = String::new();
        for (i, endpoint) in self.endpoints.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{endpoint}");
        }
        out
    }

    /// The `x-infergate-decision` value.
    pub fn explain(&self) -> String {
        let mut out = format!(
            "pool={}; basis={}; scoring={}; spilled={}; prefix_blocks={}; prefix_head={}; snapshot_age_ms={}; endpoints={}; chosen=",
            self.pool,
            self.basis.as_str(),
            match self.scoring {
                ScoringMode::PredictedTtft => "predicted-ttft",
                ScoringMode::Weighted => "weighted",
            },
            self.spilled,
            self.prefix.keyed_blocks(),
            // The first block's key names the prompt's prefix: requests that share a
            // system prompt share it, so a log shows where each prefix group went.
            self.prefix.keys.first().map_or_else(|| "-".to_string(), |hash| format!("{hash:016x}")),
            self.snapshot_age_ms.map_or_else(|| "-".to_string(), |age| age.to_string()),
            self.endpoint_header()
        );
        self.chosen.describe(&mut out);
        if let Some(runner_up) = &self.runner_up {
            out.push_str("; runner_up=");
            runner_up.describe(&mut out);
        }
        if let Some(owner) = &self.owner {
            out.push_str("; owner=");
            owner.describe(&mut out);
        }
        if let Some(split) = &self.split {
            split.describe(self.prefill.as_ref(), &mut out);
        }
        out
    }
}

/// What the router made of a request under flow control.
#[derive(Debug, Clone)]
pub enum Routing {
    Routed(Box<Decision>),
    /// Not routed now: the pool is saturated (`predicted_ttft_ms` is `None`), or the
    /// best pod's predicted TTFT is above the band's limit.
    Hold {
        pool: String,
        band: Criticality,
        predicted_ttft_ms: Option<f64>,
    },
}
