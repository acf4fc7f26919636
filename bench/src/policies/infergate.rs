//! infergate: the router the Envoy filter runs (`infergate_core::router::Router`), fed
//! the snapshot the metrics agent would build from each scrape, with its own in-flight
//! ledger and prefix recording at first token.

use std::collections::HashMap;

use infergate_core::ApiError;
use infergate_core::config::Criticality;
use infergate_core::endpoint::Endpoint;
use infergate_core::request::InferenceRequest;
use infergate_core::router::{LocalLedger, Router};

use super::{PickContext, Policy};
use crate::fleet::{FleetConfig, ScrapeView};
use crate::request::BenchRequest;

pub struct Infergate {
    router: Router,
    ledger: LocalLedger,
    endpoints: Vec<Endpoint>,
    /// Per request: the pod its counts are on, its prefix hashes, its pending prefill.
    routed: HashMap<usize, (Endpoint, Vec<u64>, u64)>,
}

impl Infergate {
    pub fn new(fleet: &FleetConfig, seed: u64) -> Self {
        Self {
            router: Router::new(fleet.routing.clone(), seed),
            ledger: LocalLedger::default(),
            endpoints: fleet.endpoints.clone(),
            routed: HashMap::new(),
        }
    }
}

impl Infergate {
    /// The pod index the router chose, or its refusal (a sheddable request to a
    /// saturated pool); the global benchmark asks clusters in turn.
    pub fn route(&mut self, ctx: &PickContext<'_>, criticality: Option<Criticality>) -> Result<usize, ApiError> {
        let request = InferenceRequest {
            model: ctx.request.model.clone(),
            stream: true,
            prompt: ctx.request.prompt.clone(),
            max_tokens: Some(ctx.request.output_tokens),
            criticality,
            ..Default::default()
        };
        let decision = self.router.route(&request, ms(ctx.now), &mut self.ledger)?;
        let endpoint = decision.chosen.endpoint;
        self.routed.insert(ctx.id, (endpoint, decision.prefix_hashes, decision.pending_prefill_tokens));
        Ok(self.endpoints.iter().position(|e| *e == endpoint).unwrap_or(0))
    }
}

fn ms(seconds: f64) -> u64 {
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

    fn on_first_token(&mut self, id: usize, pod: usize, _request: &BenchRequest) {
        if let (Some((counted_on, hashes, pending)), Some(endpoint)) = (self.routed.get(&id), self.endpoints.get(pod)) {
            self.router.prefill_done(*counted_on, *pending, &mut self.ledger);
            self.router.record_prefix(*endpoint, hashes);
        }
    }

    fn on_finish(&mut self, id: usize, _pod: usize) {
        if let Some((endpoint, _, _)) = self.routed.remove(&id) {
            // The prefill was released at the first token.
            self.router.release(endpoint, 0, &mut self.ledger);
        }
    }
}
