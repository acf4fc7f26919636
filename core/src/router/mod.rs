//! The per-worker routing state: the active config and snapshot, this worker's
//! in-flight counts, and the decision for one request.

mod candidates;
mod inflight;
mod model_list;

use crate::api_error::ApiError;
use crate::config::RoutingConfig;
use crate::endpoint::Endpoint;
use crate::request::InferenceRequest;
use crate::scoring::{rank_top, weighted_totals};
use crate::snapshot::Snapshot;
pub use inflight::InflightCounts;

/// Where a request goes, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub pool: String,
    /// The LoRA adapter the model maps to, if any.
    pub adapter: Option<String>,
    /// Best first; the rest are retry targets in order.
    pub endpoints: Vec<Endpoint>,
    pub basis: DecisionBasis,
}

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

impl Decision {
    /// The `x-gateway-destination-endpoint` value: `a,b,c`.
    pub fn endpoint_header(&self) -> String {
        let mut out = String::new();
        for (i, endpoint) in self.endpoints.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&endpoint.to_string());
        }
        out
    }
}

pub struct Router {
    config: RoutingConfig,
    snapshot: Option<Snapshot>,
    inflight: InflightCounts,
    rng: fastrand::Rng,
}

impl Router {
    /// `config` is the plugin configuration's, used until the first snapshot arrives.
    pub fn new(config: RoutingConfig, seed: u64) -> Self {
        Self {
            config,
            snapshot: None,
            inflight: InflightCounts::default(),
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    pub fn config(&self) -> &RoutingConfig {
        &self.config
    }

    pub fn snapshot(&self) -> Option<&Snapshot> {
        self.snapshot.as_ref()
    }

    /// Adopts a validated snapshot: its config becomes active, and the optimistic
    /// "sent since the last scrape" counts start again from zero.
    pub fn apply_snapshot(&mut self, snapshot: Snapshot) {
        self.config = snapshot.routing.clone();
        self.snapshot = Some(snapshot);
        self.inflight.reset_sent_since_snapshot();
    }

    /// Chooses the ranked endpoints for a request, and counts it as in flight on the
    /// first of them until [`Router::release`] is called.
    pub fn route(&mut self, request: &InferenceRequest, now_ms: u64) -> Result<Decision, ApiError> {
        let model = self
            .config
            .model(&request.model)
            .ok_or_else(|| ApiError::model_not_found(&request.model))?;
        let pool = self
            .config
            .pool(&model.pool)
            .ok_or_else(|| ApiError::model_not_found(&request.model))?;
        let (candidates, basis) = candidates::build(
            pool,
            self.snapshot.as_ref(),
            &self.inflight,
            &self.config.settings,
            now_ms,
        );
        let totals = weighted_totals(&candidates, &self.config.weights_for(pool));
        let endpoints = rank_top(
            &candidates,
            &totals,
            self.config.settings.ranked_endpoints,
            &mut self.rng,
        );
        let Some(first) = endpoints.first() else {
            return Err(ApiError::no_ready_endpoint(
                &pool.name,
                self.config.settings.retry_after_s,
            ));
        };
        self.inflight.dispatched(*first);
        Ok(Decision {
            pool: pool.name.clone(),
            adapter: model.adapter.clone(),
            endpoints,
            basis,
        })
    }

    /// The request sent to `endpoint` has finished, whatever its outcome.
    pub fn release(&mut self, endpoint: Endpoint) {
        self.inflight.finished(endpoint);
    }

    pub fn in_flight(&self, endpoint: Endpoint) -> u32 {
        self.inflight.in_flight(endpoint)
    }

    /// The body of `GET /v1/models`: every model this gateway serves.
    pub fn model_list_body(&self, created_s: u64) -> Vec<u8> {
        model_list::body(&self.config, created_s)
    }
}

#[cfg(test)]
mod tests;
