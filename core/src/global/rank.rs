//! Ranking clusters for one request. A cluster's predicted time to first token is its
//! summary's, plus the round trip when it is in another region. Clusters that meet the
//! request's class target come first, cheapest first (the local region breaks ties).
//! Then clusters that miss it, soonest first. Clusters without a fresh, healthy summary
//! come last, local region first: they get a request only when every better cluster
//! has failed it, which is how a dead or silent cluster is drained.

use std::cmp::Ordering;

use super::config::{GlobalRouterConfig, RequestClass};
use super::summary::ClusterSummary;
use crate::ApiError;
use crate::endpoint::Endpoint;

/// What the global router knows of a cluster, for this request's model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClusterState {
    /// Fresh, healthy, with ready pods: `predicted_ttft_ms` is its estimate, with the
    /// round trip if it is in another region.
    Ready { predicted_ttft_ms: f64 },
    /// Ready pods, but none for now (all busy or starting).
    NoCapacity,
    /// Its newest summary is two of its agent's intervals old (or `summary_max_age_ms`).
    Stale,
    /// No summary since this router started.
    NoSummary,
    /// Its agent reports that its gateway refuses.
    GatewayDown,
}

impl ClusterState {
    fn as_str(self) -> &'static str {
        match self {
            ClusterState::Ready { .. } => "ready",
            ClusterState::NoCapacity => "no-capacity",
            ClusterState::Stale => "stale",
            ClusterState::NoSummary => "no-summary",
            ClusterState::GatewayDown => "gateway-down",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClusterChoice {
    pub cluster: String,
    pub gateway: Endpoint,
    pub state: ClusterState,
    pub meets_target: bool,
    pub local: bool,
    pub cost_per_million_tokens: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GlobalDecision {
    pub class: RequestClass,
    pub target_ttft_ms: f64,
    /// Best first; retries go down the list.
    pub ranked: Vec<ClusterChoice>,
}

impl GlobalDecision {
    /// `ip:port,ip:port,...` for `x-gateway-destination-endpoint`.
    pub fn endpoint_header(&self) -> String {
        let gateways: Vec<String> = self.ranked.iter().map(|c| c.gateway.to_string()).collect();
        gateways.join(",")
    }

    pub fn chosen(&self) -> Option<&ClusterChoice> {
        self.ranked.first()
    }

    /// One line for the decision header and the debug log.
    pub fn explain(&self) -> String {
        let clusters: Vec<String> = self
            .ranked
            .iter()
            .map(|c| match c.state {
                ClusterState::Ready { predicted_ttft_ms } => {
                    format!("{}(ttft={predicted_ttft_ms:.0}ms,cost={})", c.cluster, c.cost_per_million_tokens)
                }
                state => format!("{}({})", c.cluster, state.as_str()),
            })
            .collect();
        format!("class={} target={:.0}ms ranked={}", self.class.as_str(), self.target_ttft_ms, clusters.join(">"))
    }
}

fn state_of(
    summary: Option<&ClusterSummary>,
    dispatched: u32,
    model: &str,
    max_age_ms: u64,
    now_ms: u64,
) -> Option<ClusterState> {
    let Some(summary) = summary else { return Some(ClusterState::NoSummary) };
    if summary.is_stale(now_ms, max_age_ms) {
        return Some(ClusterState::Stale);
    }
    if !summary.gateway_healthy {
        return Some(ClusterState::GatewayDown);
    }
    // A fresh summary that does not list the model: the cluster does not serve it.
    let served = summary.models.iter().find(|m| m.model == model)?;
    if served.ready_pods == 0 {
        return Some(ClusterState::NoCapacity);
    }
    // What this router sent since the summary is not in it yet: each such request
    // waits behind the others' prefills, spread over the ready pods.
    let backlog_ms = f64::from(dispatched) * served.prefill_ms / f64::from(served.ready_pods);
    Some(ClusterState::Ready { predicted_ttft_ms: served.predicted_ttft_ms + backlog_ms })
}

/// Ranks the configured clusters for a request for `model`; `summaries[i]` is the
/// newest summary of `config.clusters[i]`, if any, and `dispatched[i]` the requests
/// this router sent there since that summary.
pub fn rank_clusters(
    config: &GlobalRouterConfig,
    summaries: &[Option<&ClusterSummary>],
    dispatched: &[u32],
    model: &str,
    class: RequestClass,
    now_ms: u64,
) -> Result<GlobalDecision, ApiError> {
    let target = config.global.targets.for_class(class);
    let mut ranked: Vec<ClusterChoice> = config
        .clusters
        .iter()
        .enumerate()
        .filter_map(|(index, cluster)| {
            let summary = summaries.get(index).copied().flatten();
            let local = cluster.region == config.global.local_region;
            let sent = dispatched.get(index).copied().unwrap_or(0);
            let mut state = state_of(summary, sent, model, config.global.summary_max_age_ms, now_ms)?;
            if let ClusterState::Ready { predicted_ttft_ms } = &mut state {
                if !local {
                    *predicted_ttft_ms += config.global.cross_region_rtt_ms;
                }
            }
            let meets_target =
                matches!(state, ClusterState::Ready { predicted_ttft_ms } if predicted_ttft_ms <= target);
            Some(ClusterChoice {
                cluster: cluster.name.clone(),
                gateway: cluster.gateway,
                state,
                meets_target,
                local,
                cost_per_million_tokens: cluster.cost_per_million_tokens,
            })
        })
        .collect();
    if ranked.is_empty() {
        return Err(ApiError::model_not_found(model));
    }
    ranked.sort_by(compare);
    Ok(GlobalDecision { class, target_ttft_ms: target, ranked })
}

/// The group a choice falls in: lower is better.
fn group(choice: &ClusterChoice) -> u8 {
    match choice.state {
        ClusterState::Ready { .. } if choice.meets_target => 0,
        ClusterState::Ready { .. } => 1,
        ClusterState::NoCapacity => 2,
        ClusterState::Stale | ClusterState::NoSummary => 3,
        ClusterState::GatewayDown => 4,
    }
}

fn ttft(choice: &ClusterChoice) -> f64 {
    match choice.state {
        ClusterState::Ready { predicted_ttft_ms } => predicted_ttft_ms,
        _ => f64::INFINITY,
    }
}

/// Sorting is stable, so equal clusters keep the config's order.
fn compare(a: &ClusterChoice, b: &ClusterChoice) -> Ordering {
    let by_group = group(a).cmp(&group(b));
    let local_first = b.local.cmp(&a.local);
    let cheaper = a.cost_per_million_tokens.total_cmp(&b.cost_per_million_tokens);
    let sooner = ttft(a).total_cmp(&ttft(b));
    let within = match group(a) {
        0 => cheaper.then(local_first).then(sooner),
        1 => sooner.then(local_first),
        _ => local_first.then(cheaper),
    };
    by_group.then(within)
}
