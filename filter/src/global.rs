//! Tier 2's HTTP filter: reads `model` from the body, ranks the clusters from their
//! summaries, and names their gateways best first in the header the `override_host`
//! cluster of gateways routes on. Retries go down that list.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use infergate_core::ApiError;
use infergate_core::filter_config::GlobalRole;
use infergate_core::global::metering::{
    PROMPT_TOKENS_HEADER, TENANT_HEADER, USAGE_CLUSTER, USAGE_PATH, UsageReport, answer_tokens, stream_chunk_tokens,
    tenant_id,
};
use infergate_core::global::{
    ClusterState, ClusterSummary, GlobalDecision, GlobalRouterConfig, RequestClass, rank_clusters,
};
use infergate_core::request::InferenceRequest;
use infergate_core::router::model_list;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

use crate::backlog;
use crate::host;
use crate::intake::{self, BodyIntake, Intake, RequestHeaders};
use crate::metrics::{GlobalMetrics, Metric};
use crate::router::{DECISION_HEADER, ENDPOINT_HEADER, MODEL_HEADER};
use crate::summaries;

/// A client's request class; read before the reserved headers are stripped.
pub const CLASS_HEADER: &str = "x-infergate-class";
/// How often usage reports go to the rate limit service.
const USAGE_FLUSH_MS: u64 = 200;
const MAX_PENDING_REPORTS: usize = 10_000;

pub struct GlobalShared {
    config: GlobalRouterConfig,
    explain: bool,
    /// The summary generation this worker last loaded.
    generation: Cell<u64>,
    /// The newest summary of each configured cluster, in config order.
    summaries: RefCell<Vec<Option<ClusterSummary>>>,
    metrics: GlobalMetrics,
    /// Requests whose first choice was each cluster.
    chosen: Vec<Metric>,
    metering: Option<Metering>,
}

/// Token accounting for the global rate limits.
struct Metering {
    tenant_header: String,
    /// The bearer token of usage reports, from the environment.
    token: String,
    /// Usage reports waiting for the next tick, which sends them in one call.
    pending: RefCell<Vec<UsageReport>>,
}

/// Where a request was counted as backlog: its cluster and the summary it was sent
/// under.
#[derive(Clone, Copy)]
struct Backlog {
    cluster: usize,
    summary: u64,
}

/// What a metered request remembers until its answer is complete.
struct Metered {
    tenant: String,
    model: String,
    charged_tokens: u64,
    streamed: bool,
    used_tokens: Option<u64>,
}

impl GlobalShared {
    pub fn new(role: GlobalRole) -> Self {
        let chosen = role
            .config
            .clusters
            .iter()
            .map(|c| Metric::counter(&format!("infergate.global.cluster.{}.chosen", c.name)))
            .collect();
        let metering = role.config.rate_limits.as_ref().map(|limits| Metering {
            tenant_header: limits.tenant_header.clone(),
            token: std::env::var(&role.token_env).unwrap_or_default().trim().to_string(),
            pending: RefCell::new(Vec::new()),
        });
        if let Some(metering) = &metering {
            if metering.token.is_empty() {
                log::warn!("infergate global: {} is empty; usage reports will be refused", role.token_env);
            }
            host::set_tick_period_ms(USAGE_FLUSH_MS);
        }
        Self {
            metering,
            summaries: RefCell::new(vec![None; role.config.clusters.len()]),
            config: role.config,
            explain: role.explain,
            generation: Cell::new(u64::MAX),
            metrics: GlobalMetrics::define(),
            chosen,
        }
    }

    /// Reloads the summaries when the control filter stored a new one.
    fn refresh(&self) {
        let published = summaries::generation();
        if published == self.generation.get() {
            return;
        }
        self.generation.set(published);
        let Ok(mut loaded) = self.summaries.try_borrow_mut() else { return };
        for (slot, cluster) in loaded.iter_mut().zip(&self.config.clusters) {
            // Only a summary that names this cluster counts for it.
            *slot = summaries::load(&cluster.name).filter(|s| s.cluster == cluster.name);
        }
    }

    fn decide(&self, model: &str, class: RequestClass) -> Result<(GlobalDecision, Option<Backlog>), ApiError> {
        self.refresh();
        let busy = || ApiError::no_ready_endpoint("(busy)", 1);
        let loaded = self.summaries.try_borrow().map_err(|_| busy())?;
        let refs: Vec<Option<&ClusterSummary>> = loaded.iter().map(Option::as_ref).collect();
        let dispatched: Vec<u32> = refs
            .iter()
            .zip(&self.config.clusters)
            .map(|(summary, cluster)| summary.map_or(0, |s| backlog::sent_since(&cluster.name, s.sequence)))
            .collect();
        let decision = rank_clusters(&self.config, &refs, &dispatched, model, class, host::now_unix_ms())?;
        let backlog = decision.chosen().and_then(|first| {
            let index = self.config.clusters.iter().position(|c| c.name == first.cluster)?;
            let summary = loaded.get(index)?.as_ref()?.sequence;
            backlog::sent(&first.cluster, summary);
            Some(Backlog { cluster: index, summary })
        });
        Ok((decision, backlog))
    }

    /// Sends the usage reports gathered since the last tick, in one call.
    pub fn flush_usage(&self) {
        let Some(metering) = &self.metering else { return };
        let Ok(mut pending) = metering.pending.try_borrow_mut() else { return };
        if pending.is_empty() {
            return;
        }
        let body = serde_json::to_vec(&*pending).unwrap_or_default();
        let bearer = format!("Bearer {}", metering.token);
        let headers = vec![("content-type", "application/json"), ("authorization", bearer.as_str())];
        match host::dispatch_post(USAGE_CLUSTER, USAGE_PATH, headers, &body) {
            Ok(_) => pending.clear(),
            // Kept for the next tick, up to a bound: the limits must not cost memory.
            Err(status) => {
                log::warn!("infergate global: cannot send {} usage reports: {status:?}", pending.len());
                if pending.len() > MAX_PENDING_REPORTS {
                    pending.clear();
                }
            }
        }
    }

    /// A request started answering: it leaves the backlog, unless a newer summary,
    /// which counts it, already reset that.
    fn answered(&self, sent: Backlog) {
        if let Some(cluster) = self.config.clusters.get(sent.cluster) {
            backlog::answered(&cluster.name, sent.summary);
        }
    }

    /// Every model a fresh summary lists, with the clusters that serve it.
    fn model_list_body(&self) -> Vec<u8> {
        self.refresh();
        let now_ms = host::now_unix_ms();
        let mut served: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        let Ok(loaded) = self.summaries.try_borrow() else { return Vec::new() };
        for summary in loaded.iter().flatten() {
            if summary.is_stale(now_ms, self.config.global.summary_max_age_ms) {
                continue;
            }
            for model in &summary.models {
                served.entry(model.model.clone()).or_default().push(&summary.cluster);
            }
        }
        let rows: Vec<(String, String)> = served.into_iter().map(|(m, c)| (m, c.join(","))).collect();
        model_list::list_body(rows.iter().map(|(m, c)| (m.as_str(), c.as_str())), now_ms / 1000)
    }
}

pub struct GlobalHttp {
    shared: Rc<GlobalShared>,
    class: RequestClass,
    explanation: Option<String>,
    tenant: Option<String>,
    metered: Option<Metered>,
    backlog: Option<Backlog>,
    body: Option<BodyIntake>,
}

impl GlobalHttp {
    pub fn new(shared: Rc<GlobalShared>) -> Self {
        let class = shared.config.global.default_class;
        Self { shared, class, explanation: None, tenant: None, metered: None, backlog: None, body: None }
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

    fn reject(&self, error: &ApiError) -> Action {
        self.shared.metrics.rejected.increment();
        intake::reply_error(error)
    }

    fn route(&mut self, request: InferenceRequest) -> Result<(), ApiError> {
        let (decision, backlog) = self.shared.decide(&request.model, self.class)?;
        self.backlog = backlog;
        let headers = host::set_request_header(ENDPOINT_HEADER, Some(&decision.endpoint_header()))
            .and_then(|()| host::set_request_header(MODEL_HEADER, Some(&request.model)));
        if let Err(status) = headers {
            log::error!("infergate global: cannot set routing headers: {status:?}");
        }
        if let Some(tenant) = self.tenant.take() {
            let charged_tokens = u64::from(request.prompt_tokens());
            let metered = host::set_request_header(TENANT_HEADER, Some(&tenant))
                .and_then(|()| host::set_request_header(PROMPT_TOKENS_HEADER, Some(&charged_tokens.to_string())));
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
        self.shared.metrics.decisions.increment();
        if let Some(first) = decision.ranked.first() {
            if !matches!(first.state, ClusterState::Ready { .. }) {
                self.shared.metrics.blind.increment();
            }
            if let Some(index) = self.shared.config.clusters.iter().position(|c| c.name == first.cluster) {
                if let Some(metric) = self.shared.chosen.get(index) {
                    metric.increment();
                }
            }
        }
        log::debug!("infergate global: {}", decision.explain());
        self.explanation = self.shared.explain.then(|| decision.explain());
        Ok(())
    }
}

impl Context for GlobalHttp {}

impl HttpContext for GlobalHttp {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let headers = RequestHeaders::read();
        if let Some(value) = headers.get(CLASS_HEADER) {
            match RequestClass::from_header(value) {
                Some(class) => self.class = class,
                None => {
                    return self.reject(&ApiError::invalid_request(
                        "invalid_class",
                        None,
                        "`x-infergate-class` must be `latency` or `batch`.",
                    ));
                }
            }
        }
        if let Some(metering) = &self.shared.metering {
            self.tenant = Some(tenant_id(headers.get(&metering.tenant_header)));
        }
        headers.strip_reserved();
        match intake::on_headers(&headers, end_of_stream, self.shared.config.gateway.max_body_bytes) {
            Ok(Intake::ListModels) => {
                host::reply(200, vec![("content-type", "application/json")], &self.shared.model_list_body());
                Action::Pause
            }
            Ok(Intake::AwaitBody) => Action::Pause,
            Err(error) => self.reject(&error),
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        // The global router hashes no prefix: only the prompt's length is kept.
        let full_parses = self.shared.metrics.full_parses;
        let body = self.body.get_or_insert_with(|| BodyIntake::new(0, full_parses));
        let request = match body.on_body(body_size, end_of_stream, self.shared.config.gateway.max_body_bytes) {
            Ok(Some(request)) => request,
            Ok(None) => return Action::Pause,
            Err(error) => return self.reject(&error),
        };
        match self.route(request) {
            Ok(()) => Action::Continue,
            Err(error) => self.reject(&error),
        }
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        if let Some(backlog) = self.backlog.take() {
            self.shared.answered(backlog);
        }
        if let Some(explanation) = &self.explanation {
            let _ = host::set_response_header(DECISION_HEADER, explanation);
        }
        if self.metered.is_some() {
            let served_ok = host::response_status().is_some_and(|s| (200..300).contains(&s));
            let streamed = host::response_header("content-type").is_some_and(|t| t.starts_with("text/event-stream"));
            match self.metered.as_mut() {
                Some(metered) if served_ok && !end_of_stream => metered.streamed = streamed,
                // Refused or empty: the admission charge stands.
                _ => self.metered = None,
            }
        }
        Action::Continue
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let Some(metered) = self.metered.as_mut() else { return Action::Continue };
        if metered.streamed {
            // Each chunk passes at once; the usage event is the stream's last data.
            if let Some(tokens) = host::response_body(body_size).as_deref().and_then(stream_chunk_tokens) {
                metered.used_tokens = Some(tokens);
            }
        } else if !end_of_stream {
            // A whole answer is small: hold it until its `usage` can be read.
            return Action::Pause;
        } else {
            metered.used_tokens = host::response_body(body_size).as_deref().and_then(answer_tokens);
        }
        if end_of_stream {
            self.finish_metering();
        }
        Action::Continue
    }

    fn on_log(&mut self) {
        // No answer came (a reset, a timeout): leave the backlog all the same.
        if let Some(backlog) = self.backlog.take() {
            self.shared.answered(backlog);
        }
    }
}
