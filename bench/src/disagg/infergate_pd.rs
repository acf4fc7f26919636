//! infergate on a fleet with roles: the router the filter ships
//! (`infergate_core::router::Router`), its pool given a `disaggregation` section, fed
//! the snapshot the agent builds from each scrape. The decision's `chosen` is the
//! decode pod; its `prefill` leg, when the split rule says so, the prefill pod.
//!
//! The bookkeeping is the router's own: the decision counts the request on both
//! pods; `prefill_leg_done` releases the prefill pod when the leg returns,
//! `prefill_done` the decode pod's pending prefill at the first token, `release` the
//! decode pod at the end. The first token of a request served whole is compared with
//! the TTFT predicted for it, which the router learns from; a split request's is not,
//! since its first token waited on two pods and a link that the pool's whole-request
//! calibration does not model.

use std::collections::HashMap;

use infergate_core::config::SplitPolicy;
use infergate_core::endpoint::Endpoint;
use infergate_core::request::InferenceRequest;
use infergate_core::router::{LocalLedger, PrefillLeg, Router};

use super::policy::{PdChoice, PdContext, PdPolicy, decode_pods};
use crate::fleet::{FleetConfig, ScrapeView};
use crate::request::BenchRequest;

pub struct InfergatePd {
    router: Router,
    ledger: LocalLedger,
    endpoints: Vec<Endpoint>,
    split: SplitPolicy,
    routed: HashMap<usize, Routed>,
}

/// A request routed and not finished.
struct Routed {
    decode: Endpoint,
    pending_prefill_tokens: u64,
    /// Until it returns.
    leg: Option<PrefillLeg>,
    split: bool,
    pool: String,
    routed_at: f64,
    predicted_ttft_ms: f64,
}

impl InfergatePd {
    pub fn new(fleet: &FleetConfig, split: SplitPolicy, seed: u64) -> Self {
        Self {
            router: Router::new(fleet.routing.clone(), seed),
            ledger: LocalLedger::default(),
            endpoints: fleet.endpoints.clone(),
            split,
            routed: HashMap::new(),
        }
    }

    fn index(&self, endpoint: Endpoint) -> Option<usize> {
        self.endpoints.iter().position(|e| *e == endpoint)
    }
}

fn ms(seconds: f64) -> u64 {
    (seconds * 1000.0).max(0.0) as u64
}

impl PdPolicy for InfergatePd {
    fn name(&self) -> String {
        match self.split {
            SplitPolicy::Predicted => "pd/infergate".into(),
            SplitPolicy::Always => "pd/infergate-always".into(),
            SplitPolicy::Never => "pd/infergate-never".into(),
        }
    }

    fn on_scrape(&mut self, scrape: &ScrapeView, _engines: &[infergate_model_sim::engine::Engine], _now: f64) {
        self.router.apply_snapshot(scrape.snapshot.clone(), &self.ledger);
    }

    fn route(&mut self, ctx: &PdContext<'_>) -> PdChoice {
        let prefix = &self.router.config().settings.prefix;
        let request = InferenceRequest {
            stream: true,
            max_tokens: Some(ctx.request.output_tokens),
            ..InferenceRequest::of_text(&ctx.request.model, &ctx.request.prompt.bytes(), prefix)
        };
        let Ok(decision) = self.router.route(&request, ms(ctx.now), &mut self.ledger) else {
            // No pod answered (never here: every pod is ready): the first decode pod.
            return PdChoice::whole(decode_pods(ctx.roles).first().copied().unwrap_or(0));
        };
        let decode = self.index(decision.chosen.endpoint).unwrap_or(0);
        let prefill = decision.prefill.as_ref().and_then(|leg| self.index(leg.endpoint()));
        self.routed.insert(
            ctx.id,
            Routed {
                decode: decision.chosen.endpoint,
                pending_prefill_tokens: decision.pending_prefill_tokens,
                split: decision.prefill.is_some(),
                leg: decision.prefill,
                pool: decision.pool,
                routed_at: ctx.now,
                predicted_ttft_ms: decision.chosen.ttft.ttft_ms,
            },
        );
        PdChoice { decode, prefill }
    }

    fn on_prefill_done(&mut self, id: usize, _pod: usize, _at: f64) {
        if let Some(leg) = self.routed.get_mut(&id).and_then(|r| r.leg.take()) {
            self.router.prefill_leg_done(&leg, &mut self.ledger);
        }
    }

    fn on_first_token(&mut self, id: usize, _pod: usize, _request: &BenchRequest, at: f64) {
        let Some(routed) = self.routed.get(&id) else { return };
        self.router.prefill_done(routed.decode, routed.pending_prefill_tokens, &mut self.ledger);
        if !routed.split {
            let observed_ms = (at - routed.routed_at) * 1000.0;
            self.router.observe_first_token(&routed.pool, routed.predicted_ttft_ms, observed_ms);
        }
    }

    fn on_finish(&mut self, id: usize, _pod: usize, _at: f64) {
        if let Some(routed) = self.routed.remove(&id) {
            if let Some(leg) = &routed.leg {
                self.router.prefill_leg_done(leg, &mut self.ledger);
            }
            self.router.release(routed.decode, 0, &mut self.ledger);
        }
    }
}
