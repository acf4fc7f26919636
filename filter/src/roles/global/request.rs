//! One request through the global router: honour the client's class and tenant, rank
//! the clusters, name their gateways best first, count the request as its cluster's
//! backlog until it answers, and meter its tokens for the rate limits. The steps
//! every client-facing request takes are `front`'s.

use std::rc::Rc;

use infergate_core::ApiError;
use infergate_core::config::PrefixSettings;
use infergate_core::global::metering::{UsageReport, answer_tokens, stream_chunk_tokens, tenant_id};
use infergate_core::global::{ClusterState, RequestClass};
use infergate_core::request::InferenceRequest;
use infergate_core::wire::header;

use super::{Backlog, GlobalShared};
use crate::host::Host;
use crate::host::events::Flow;
use crate::metrics::Metric;
use crate::roles::front::intake::RequestHeaders;
use crate::roles::front::{Admitted, FrontRole, ResponseView};

/// What a metered request remembers until its answer is complete.
struct Metered {
    tenant: String,
    model: String,
    charged_tokens: u64,
    streamed: bool,
    used_tokens: Option<u64>,
}

pub struct GlobalRequest {
    shared: Rc<GlobalShared>,
    class: RequestClass,
    explanation: Option<String>,
    tenant: Option<String>,
    metered: Option<Metered>,
    backlog: Option<Backlog>,
}

impl GlobalRequest {
    pub fn new(shared: Rc<GlobalShared>) -> Self {
        let class = shared.config.global.default_class;
        Self { shared, class, explanation: None, tenant: None, metered: None, backlog: None }
    }

    /// The answer is complete: its usage, if it reported one, corrects the charge.
    fn finish_metering(&mut self) {
        let Some(metered) = self.metered.take() else { return };
        let (Some(used_tokens), Some(metering)) = (metered.used_tokens, &self.shared.metering) else { return };
        if let Ok(mut pending) = metering.pending.try_borrow_mut() {
            pending.push(UsageReport {
                tenant: metered.tenant,
                model: metered.model,
                charged_tokens: metered.charged_tokens,
                used_tokens,
            });
        }
    }

    /// Leaves the backlog, once.
    fn leave_backlog(&mut self) {
        if let Some(backlog) = self.backlog.take() {
            self.shared.answered(backlog);
        }
    }
}

impl FrontRole for GlobalRequest {
    fn host(&self) -> &dyn Host {
        &*self.shared.host
    }

    fn max_body_bytes(&self) -> u64 {
        self.shared.config.gateway.max_body_bytes
    }

    /// The global router hashes no prefix: only the prompt's length is counted.
    fn prefix_settings(&self) -> PrefixSettings {
        PrefixSettings { max_blocks: 0, ..PrefixSettings::default() }
    }

    fn full_parses(&self) -> &Metric {
        &self.shared.metrics.full_parses
    }

    fn read_client_headers(&mut self, headers: &RequestHeaders) -> Result<(), ApiError> {
        if let Some(value) = headers.get(header::CLASS) {
            self.class = RequestClass::from_header(value).ok_or_else(|| {
                ApiError::invalid_request("invalid_class", None, "`x-infergate-class` must be `latency` or `batch`.")
            })?;
        }
        let source = &self.shared.tenant;
        let value = headers.get(&source.header).filter(|v| !v.trim().is_empty());
        if value.is_none() && source.required {
            return Err(ApiError::missing_identity());
        }
        if self.shared.metering.is_some() {
            self.tenant = Some(tenant_id(value));
        }
        Ok(())
    }

    fn model_list(&self) -> Result<Vec<u8>, ApiError> {
        self.shared.model_list_body()
    }

    fn route(&mut self, request: InferenceRequest, _early: bool) -> Result<Admitted, ApiError> {
        let shared = Rc::clone(&self.shared);
        let host = &*shared.host;
        let (decision, backlog) = shared.decide(&request.model, self.class)?;
        self.backlog = backlog;
        let headers = host
            .set_request_header(header::ENDPOINT, Some(&decision.endpoint_header()))
            .and_then(|()| host.set_request_header(header::MODEL, Some(&request.model)));
        if let Err(status) = headers {
            log::error!("infergate global: cannot set routing headers: {status:?}");
        }
        if let Some(tenant) = self.tenant.take() {
            let charged_tokens = u64::from(request.prompt_tokens());
            let metered = host
                .set_request_header(header::TENANT, Some(&tenant))
                .and_then(|()| host.set_request_header(header::PROMPT_TOKENS, Some(&charged_tokens.to_string())));
            if let Err(status) = metered {
                log::error!("infergate global: cannot set rate limit headers: {status:?}");
            }
            self.metered = Some(Metered {
                tenant,
                model: request.model.clone(),
                charged_tokens,
                streamed: false,
                used_tokens: None,
            });
        }
        let metrics = &shared.metrics;
        metrics.decisions.increment();
        if let Some(first) = decision.ranked.first() {
            if !matches!(first.state, ClusterState::Ready { .. }) {
                metrics.blind.increment();
            }
            if let Some(index) = shared.config.clusters.iter().position(|c| c.name == first.cluster) {
                if let Some(metric) = metrics.chosen.get(index) {
                    metric.increment();
                }
            }
        }
        log::debug!("infergate global: {}", decision.explain());
        self.explanation = shared.explain.then(|| decision.explain());
        Ok(Admitted::Routed)
    }

    fn count_rejection(&self, _error: &ApiError) {
        self.shared.metrics.rejected.increment();
    }

    fn explanation(&self) -> Option<String> {
        self.explanation.clone()
    }

    fn on_response_headers(&mut self, end_of_stream: bool) {
        self.leave_backlog();
        if self.metered.is_some() {
            let host = self.host();
            let (served_ok, streamed) = (host.served_ok(), host.streamed());
            match self.metered.as_mut() {
                Some(metered) if served_ok && !end_of_stream => metered.streamed = streamed,
                // Refused or empty: the admission charge stands.
                _ => self.metered = None,
            }
        }
    }

    fn on_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Flow {
        let host = Rc::clone(&self.shared.host);
        let Some(metered) = self.metered.as_mut() else { return Flow::Continue };
        if metered.streamed {
            // Each chunk passes at once; the usage event is the stream's last data.
            if let Some(tokens) = host.response_body(0, body_size).as_deref().and_then(stream_chunk_tokens) {
                metered.used_tokens = Some(tokens);
            }
        } else if !end_of_stream {
            // A whole answer is small: hold it until its `usage` can be read.
            return Flow::Pause;
        } else {
            metered.used_tokens = host.response_body(0, body_size).as_deref().and_then(answer_tokens);
        }
        if end_of_stream {
            self.finish_metering();
        }
        Flow::Continue
    }

    /// No answer came (a reset, a timeout): leave the backlog all the same.
    fn on_log(&mut self) {
        self.leave_backlog();
    }
}
