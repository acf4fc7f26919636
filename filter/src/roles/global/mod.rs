//! Tier 2's role, on the global router's main listener: per-worker state shared by its
//! streams (the clusters' summaries as last loaded, the metrics, the usage reports
//! waiting to go to the rate limit service).

mod backlog;
mod request;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use infergate_core::ApiError;
use infergate_core::config::TenantSource;
use infergate_core::filter_config::GlobalRole;
use infergate_core::global::metering::UsageReport;
use infergate_core::global::{ClusterSummary, GlobalDecision, GlobalRouterConfig, RequestClass, rank_clusters};
use infergate_core::router::model_list;
use infergate_core::wire::{cluster, path};

use crate::host::Host;
use crate::host::events::{RootEvents, StreamEvents};
use crate::metrics::Metric;
use crate::roles::front::FrontStream;
use crate::shared::summaries;
use request::GlobalRequest;

/// How often usage reports go to the rate limit service.
const USAGE_FLUSH_MS: u64 = 200;
const MAX_PENDING_REPORTS: usize = 10_000;

/// The global router's metrics.
struct GlobalMetrics {
    decisions: Metric,
    /// Decisions whose first cluster had no fresh, healthy summary.
    blind: Metric,
    rejected: Metric,
    /// As the router's `full_parses`.
    full_parses: Metric,
    /// Requests whose first choice was each cluster, in config order.
    chosen: Vec<Metric>,
}

impl GlobalMetrics {
    fn define(host: &Rc<dyn Host>, config: &GlobalRouterConfig) -> Self {
        Self {
            decisions: Metric::counter(host, "infergate.global.decisions"),
            blind: Metric::counter(host, "infergate.global.blind"),
            rejected: Metric::counter(host, "infergate.global.rejected"),
            full_parses: Metric::counter(host, "infergate.global.full_parses"),
            chosen: config
                .clusters
                .iter()
                .map(|c| Metric::counter(host, &format!("infergate.global.cluster.{}.chosen", c.name)))
                .collect(),
        }
    }
}

pub struct GlobalShared {
    host: Rc<dyn Host>,
    config: GlobalRouterConfig,
    explain: bool,
    /// The summary generation this worker last loaded.
    generation: Cell<u64>,
    /// The newest summary of each configured cluster, in config order.
    summaries: RefCell<Vec<Option<ClusterSummary>>>,
    metrics: GlobalMetrics,
    metering: Option<Metering>,
    /// Where each request's tenant is read (`identity`, else the rate limits' header).
    tenant: TenantSource,
}

/// Token accounting for the global rate limits.
struct Metering {
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

impl GlobalShared {
    pub fn new(host: Rc<dyn Host>, role: GlobalRole) -> Self {
        let tenant = role.config.tenant_source();
        let metering = role.config.rate_limits.as_ref().map(|_| Metering {
            token: host.env_var(&role.token_env).unwrap_or_default().trim().to_string(),
            pending: RefCell::new(Vec::new()),
        });
        if let Some(metering) = &metering {
            if metering.token.is_empty() {
                log::warn!("infergate global: {} is empty; usage reports will be refused", role.token_env);
            }
            host.tick_every_ms(USAGE_FLUSH_MS);
        }
        Self {
            metering,
            tenant,
            summaries: RefCell::new(vec![None; role.config.clusters.len()]),
            metrics: GlobalMetrics::define(&host, &role.config),
            config: role.config,
            explain: role.explain,
            generation: Cell::new(u64::MAX),
            host,
        }
    }

    /// Reloads the summaries when the control filter stored a new one.
    fn refresh(&self) {
        let published = summaries::generation(&*self.host);
        if published == self.generation.get() {
            return;
        }
        self.generation.set(published);
        let Ok(mut loaded) = self.summaries.try_borrow_mut() else { return };
        for (slot, cluster) in loaded.iter_mut().zip(&self.config.clusters) {
            // Only a summary that names this cluster counts for it.
            *slot = summaries::load(&*self.host, &cluster.name).filter(|s| s.cluster == cluster.name);
        }
    }

    fn decide(&self, model: &str, class: RequestClass) -> Result<(GlobalDecision, Option<Backlog>), ApiError> {
        self.refresh();
        let host = &*self.host;
        let loaded = self.summaries.try_borrow().map_err(|_| ApiError::gateway_busy())?;
        let refs: Vec<Option<&ClusterSummary>> = loaded.iter().map(Option::as_ref).collect();
        let dispatched: Vec<u32> = refs
            .iter()
            .zip(&self.config.clusters)
            .map(|(summary, cluster)| summary.map_or(0, |s| backlog::sent_since(host, &cluster.name, s.sequence)))
            .collect();
        let decision = rank_clusters(&self.config, &refs, &dispatched, model, class, host.now_unix_ms())?;
        let backlog = decision.chosen().and_then(|first| {
            let index = self.config.clusters.iter().position(|c| c.name == first.cluster)?;
            let summary = loaded.get(index)?.as_ref()?.sequence;
            backlog::sent(host, &first.cluster, summary);
            Some(Backlog { cluster: index, summary })
        });
        Ok((decision, backlog))
    }

    /// Sends the usage reports gathered since the last tick, in one call.
    fn flush_usage(&self) {
        let Some(metering) = &self.metering else { return };
        let Ok(mut pending) = metering.pending.try_borrow_mut() else { return };
        if pending.is_empty() {
            return;
        }
        let body = match serde_json::to_vec(&*pending) {
            Ok(body) => body,
            Err(err) => {
                log::error!("infergate global: cannot encode {} usage reports, dropped: {err}", pending.len());
                pending.clear();
                return;
            }
        };
        let bearer = format!("Bearer {}", metering.token);
        let headers = [("content-type", "application/json"), ("authorization", bearer.as_str())];
        match self.host.post(cluster::USAGE, path::USAGE, &headers, &body) {
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
            backlog::answered(&*self.host, &cluster.name, sent.summary);
        }
    }

    /// Every model a fresh summary lists, with the clusters that serve it.
    fn model_list_body(&self) -> Result<Vec<u8>, ApiError> {
        self.refresh();
        let now_ms = self.host.now_unix_ms();
        let mut served: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        let loaded = self.summaries.try_borrow().map_err(|_| ApiError::gateway_busy())?;
        for summary in loaded.iter().flatten() {
            if summary.is_stale(now_ms, self.config.global.summary_max_age_ms) {
                continue;
            }
            for model in &summary.models {
                served.entry(model.model.clone()).or_default().push(&summary.cluster);
            }
        }
        let rows: Vec<(String, String)> = served.into_iter().map(|(m, c)| (m, c.join(","))).collect();
        Ok(model_list::list_body(rows.iter().map(|(m, c)| (m.as_str(), c.as_str())), now_ms / 1000))
    }
}

impl RootEvents for Rc<GlobalShared> {
    fn on_tick(&mut self) {
        self.flush_usage();
    }

    fn new_stream(&self, _context_id: u32) -> Box<dyn StreamEvents> {
        Box::new(FrontStream::new(GlobalRequest::new(Rc::clone(self))))
    }
}

#[cfg(test)]
mod tests;
