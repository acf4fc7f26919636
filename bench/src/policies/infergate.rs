//! infergate: the router the Envoy filter runs (`infergate_core::router::Router`), fed
//! the snapshot the metrics agent would build from each scrape, with its own in-flight
//! ledger; the router claims a prompt's blocks when it routes it, as the filter does
//! (which records them again only where a retry moved the request, never here). Each
//! first token is compared with the TTFT the router predicted for it, which the router
//! learns from and the calibration report reads.

use std::collections::HashMap;

use infergate_core::ApiError;
use infergate_core::config::{Criticality, FlowControlSettings};
use infergate_core::endpoint::Endpoint;
use infergate_core::prefix::{PrefixChain, PrefixRecord};
use infergate_core::request::InferenceRequest;
use infergate_core::router::{Decision, LocalLedger, Router, Routing};

use super::{PickContext, Policy};
use crate::calibration::TtftPrediction;
use crate::fleet::{FleetConfig, ScrapeView};
use crate::request::BenchRequest;
use crate::results::Belief;

pub struct Infergate {
    pub(super) router: Router,
    pub(super) ledger: LocalLedger,
    pub(super) endpoints: Vec<Endpoint>,
    /// Per request: what was routed, until it finishes.
    routed: HashMap<usize, Routed>,
    /// Each first token beside its prediction, in the order they came.
    predictions: Vec<TtftPrediction>,
    /// Each first token's prefix belief.
    beliefs: Vec<Belief>,
}

struct Routed {
    /// The pod its counts are on.
    counted_on: Endpoint,
    prefix: PrefixChain,
    pending_prefill_tokens: u64,
    pool: String,
    /// When it was routed and the TTFT predicted for it, seconds and milliseconds.
    routed_at: f64,
    predicted_ttft_ms: f64,
    /// Prompt tokens believed cached on `counted_on`.
    believed_cached_tokens: f64,
}

impl Infergate {
    pub fn new(fleet: &FleetConfig, seed: u64) -> Self {
        Self {
            router: Router::new(fleet.routing.clone(), seed),
            ledger: LocalLedger::default(),
            endpoints: fleet.endpoints.clone(),
            routed: HashMap::new(),
            predictions: Vec::new(),
            beliefs: Vec::new(),
        }
    }
}

impl Infergate {
    /// The pod index the router chose, or its refusal (a sheddable request to a
    /// saturated pool); the global benchmark asks clusters in turn.
    pub fn route(&mut self, ctx: &PickContext<'_>, criticality: Option<Criticality>) -> Result<usize, ApiError> {
        let decision = self.router.route(&self.request(ctx, criticality), ms(ctx.now), &mut self.ledger)?;
        Ok(self.remember(ctx, decision))
    }

    /// The pod index, or `None` while flow control holds the request (the flow-control
    /// benchmark's gateway queue asks again when room may have freed).
    pub fn route_or_hold(
        &mut self,
        ctx: &PickContext<'_>,
        criticality: Criticality,
        flow: &FlowControlSettings,
    ) -> Result<Option<usize>, ApiError> {
        let request = self.request(ctx, Some(criticality));
        match self.router.route_or_hold(&request, ms(ctx.now), &mut self.ledger, flow)? {
            Routing::Routed(decision) => Ok(Some(self.remember(ctx, *decision))),
            Routing::Hold { .. } => Ok(None),
        }
    }

    /// The prefix claim request `id`'s decision made, as its replica reports it.
    pub(super) fn claim(&self, id: usize) -> Option<PrefixRecord> {
        let routed = self.routed.get(&id)?;
        Some(PrefixRecord::of_chain(routed.counted_on, &routed.prefix))
    }

    fn request(&self, ctx: &PickContext<'_>, criticality: Option<Criticality>) -> InferenceRequest {
        let prefix = &self.router.config().settings.prefix;
        InferenceRequest {
            stream: true,
            max_tokens: Some(ctx.request.output_tokens),
            criticality,
            ..InferenceRequest::of_text(&ctx.request.model, &ctx.request.prompt.bytes(), prefix)
        }
    }

    fn remember(&mut self, ctx: &PickContext<'_>, decision: Decision) -> usize {
        let endpoint = decision.chosen.endpoint;
        self.routed.insert(
            ctx.id,
            Routed {
                counted_on: endpoint,
                prefix: decision.prefix,
                pending_prefill_tokens: decision.pending_prefill_tokens,
                pool: decision.pool,
                routed_at: ctx.now,
                predicted_ttft_ms: decision.chosen.ttft.ttft_ms,
                believed_cached_tokens: decision.chosen.cached_tokens,
            },
        );
        self.endpoints.iter().position(|e| *e == endpoint).unwrap_or(0)
    }
}

pub(super) fn ms(seconds: f64) -> u64 {
    (seconds * 1000.0).max(0.0) as u64
}

impl Policy for Infergate {
    fn name(&self) -> &'static str {
        "infergate"
    }

    fn on_scrape(&mut self, scrape: &ScrapeView, _now: f64) {
        self.router.apply_snapshot(scrape.snapshot.clone(), &self.ledger);
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        self.route(ctx, None).unwrap_or(0)
    }

    fn on_first_token(&mut self, id: usize, pod: usize, _request: &BenchRequest, at: f64) {
        if let (Some(routed), Some(&endpoint)) = (self.routed.get(&id), self.endpoints.get(pod)) {
            self.router.prefill_done(routed.counted_on, routed.pending_prefill_tokens, &mut self.ledger);
            if endpoint != routed.counted_on {
                self.router.record_prefix(endpoint, &routed.prefix);
            }
            let observed_ms = (at - routed.routed_at) * 1000.0;
            self.router.observe_first_token(&routed.pool, routed.predicted_ttft_ms, observed_ms);
            self.beliefs.push(Belief { id, believed_tokens: routed.believed_cached_tokens });
            self.predictions.push(TtftPrediction {
                routed_at_s: routed.routed_at,
                pod,
                predicted_ms: routed.predicted_ttft_ms,
                observed_ms,
            });
        }
    }

    fn on_finish(&mut self, id: usize, _pod: usize) {
        if let Some(routed) = self.routed.remove(&id) {
            // The prefill was released at the first token.
            self.router.release(routed.counted_on, 0, &mut self.ledger);
        }
    }

    fn ttft_predictions(&self) -> Option<&[TtftPrediction]> {
        Some(&self.predictions)
    }

    fn prefix_beliefs(&self) -> Option<&[Belief]> {
        Some(&self.beliefs)
    }
}
