//! The global layer's policies over two clusters, each routed inside by the tier-1
//! router (`Infergate`, the filter's code). Cluster `c` holds pods
//! `c * pods_per_cluster ..`; each sees only its own pods' scrape.

use infergate_core::config::Criticality;
use infergate_core::global::{
    ClassTargets, ClusterConfig, ClusterSummary, GlobalRouterConfig, GlobalSettings, RequestClass, rank_clusters,
    summarize,
};
use infergate_core::snapshot::Snapshot;

use super::workload::{Region, Tags};
use crate::fleet::{FleetConfig, SCRAPE_INTERVAL_S, ScrapeView, pod_endpoint};
use crate::policies::{Infergate, PickContext, Policy};
use crate::request::BenchRequest;

const NAMES: [&str; 2] = ["east", "west"];
/// Per million tokens: east's GPUs cost more than west's.
const COSTS: [f64; 2] = [0.60, 0.40];
/// The round trip between the regions, paid by a request served in the other one
/// (added to its TTFT in the results, and known to the global router's ranking).
pub const CROSS_REGION_RTT_MS: f64 = 60.0;

/// Two clusters of the simulated fleet, each with its own tier-1 router.
pub struct Clusters {
    pods_per_cluster: usize,
    routers: Vec<Infergate>,
}

impl Clusters {
    pub fn new(pods_per_cluster: usize, seed: u64) -> Self {
        let routers = (0..2)
            .map(|c| {
                let mut fleet = FleetConfig::new(pods_per_cluster * 2, &[]);
                let mine: Vec<_> = (c * pods_per_cluster..(c + 1) * pods_per_cluster).map(pod_endpoint).collect();
                fleet.endpoints.clone_from(&mine);
                fleet.routing.pools[0].endpoints = mine;
                Infergate::new(&fleet, seed + c as u64)
            })
            .collect();
        Self { pods_per_cluster, routers }
    }

    pub fn of_pod(&self, pod: usize) -> usize {
        (pod / self.pods_per_cluster).min(1)
    }

    pub fn cost(&self, cluster: usize) -> f64 {
        COSTS[cluster.min(1)]
    }

    /// Each cluster's view: only its pods.
    fn scrape_of(&self, scrape: &ScrapeView, cluster: usize) -> ScrapeView {
        let range = cluster * self.pods_per_cluster..(cluster + 1) * self.pods_per_cluster;
        let mine: Vec<_> = range.clone().map(pod_endpoint).collect();
        let mut snapshot: Snapshot = scrape.snapshot.clone();
        for pool in &mut snapshot.pools {
            pool.pods.retain(|p| mine.contains(&p.address));
        }
        for pool in &mut snapshot.routing.pools {
            pool.endpoints.retain(|e| mine.contains(e));
        }
        let signals = scrape.signals.get(range).map(<[_]>::to_vec).unwrap_or_default();
        ScrapeView { signals, snapshot }
    }

    fn on_scrape(&mut self, scrape: &ScrapeView, now: f64) -> Vec<ScrapeView> {
        (0..2)
            .map(|c| {
                let view = self.scrape_of(scrape, c);
                self.routers[c].on_scrape(&view, now);
                view
            })
            .collect()
    }

    /// Routes in `cluster`; the global pod index, or the tier-1 refusal.
    fn route(&mut self, cluster: usize, ctx: &PickContext<'_>, criticality: Criticality) -> Option<usize> {
        let local = self.routers[cluster].route(ctx, Some(criticality)).ok()?;
        Some(cluster * self.pods_per_cluster + local)
    }

    fn on_first_token(&mut self, id: usize, pod: usize, request: &BenchRequest, at: f64) {
        let cluster = self.of_pod(pod);
        self.routers[cluster].on_first_token(id, pod % self.pods_per_cluster, request, at);
    }

    fn on_finish(&mut self, id: usize, pod: usize) {
        let cluster = self.of_pod(pod);
        self.routers[cluster].on_finish(id, pod % self.pods_per_cluster);
    }
}

fn criticality(tag: &Tags) -> Criticality {
    if tag.batch { Criticality::Sheddable } else { Criticality::Standard }
}

/// What sits in front of the clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// infergate's global router: ranks clusters from their summaries for each
    /// request's region and class, and asks them in order (a refusal moves on). The
    /// latency class's target, in ms, is the knob that trades cost for latency.
    Infergate { latency_target_ms: u32 },
    /// Round robin across clusters: a plain load balancer in front of the gateways.
    /// A refusal is final (429 is not retried).
    RoundRobin,
    /// No tier 2: each region's clients use their own region's cluster.
    RegionLocal,
}

impl Layer {
    pub const ALL: [Layer; 4] = [
        Layer::Infergate { latency_target_ms: 500 },
        Layer::Infergate { latency_target_ms: 200 },
        Layer::RoundRobin,
        Layer::RegionLocal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Layer::Infergate { latency_target_ms: 500 } => "infergate, 500 ms latency target",
            Layer::Infergate { latency_target_ms: 200 } => "infergate, 200 ms latency target",
            Layer::Infergate { .. } => "infergate",
            Layer::RoundRobin => "round robin across clusters",
            Layer::RegionLocal => "region-local (no tier 2)",
        }
    }
}

/// A global layer over two clusters, each routed inside by the tier-1 router.
pub struct GlobalLayer {
    layer: Layer,
    pub clusters: Clusters,
    tags: Vec<Tags>,
    /// One config per client region: each region's global router prefers its own.
    configs: [GlobalRouterConfig; 2],
    summaries: Vec<Option<ClusterSummary>>,
    /// Requests sent to each cluster since its latest summary that have not started
    /// answering, and under which summary each was sent.
    dispatched: Vec<u32>,
    backlog: std::collections::HashMap<usize, (usize, u64)>,
    sequence: u64,
    next: usize,
    chosen: Option<usize>,
}

fn config(local: Region, latency_target_ms: f64) -> GlobalRouterConfig {
    GlobalRouterConfig {
        version: 1,
        gateway: Default::default(),
        global: GlobalSettings {
            local_region: NAMES[local.index()].into(),
            summary_max_age_ms: 2_000,
            default_class: RequestClass::Latency,
            targets: ClassTargets { latency_ttft_ms: latency_target_ms, batch_ttft_ms: 30_000.0 },
            cross_region_rtt_ms: CROSS_REGION_RTT_MS,
        },
        clusters: (0..2)
            .map(|c| ClusterConfig {
                name: NAMES[c].into(),
                region: NAMES[c].into(),
                gateway: pod_endpoint(1000 + c),
                cost_per_million_tokens: COSTS[c],
            })
            .collect(),
        rate_limits: None,
        identity: Default::default(),
    }
}

fn ms(seconds: f64) -> u64 {
    (seconds * 1000.0).max(0.0) as u64
}

impl GlobalLayer {
    pub fn new(layer: Layer, pods_per_cluster: usize, tags: Vec<Tags>, seed: u64) -> Self {
        Self {
            layer,
            clusters: Clusters::new(pods_per_cluster, seed),
            tags,
            configs: {
                let target = match layer {
                    Layer::Infergate { latency_target_ms } => f64::from(latency_target_ms),
                    _ => 500.0,
                };
                [config(Region::East, target), config(Region::West, target)]
            },
            summaries: vec![None, None],
            dispatched: vec![0, 0],
            backlog: std::collections::HashMap::new(),
            sequence: 0,
            next: 0,
            chosen: None,
        }
    }

    /// The clusters to ask, in order.
    fn order(&mut self, ctx: &PickContext<'_>, tag: Tags) -> Vec<usize> {
        match self.layer {
            Layer::Infergate { .. } => {
                let class = if tag.batch { RequestClass::Batch } else { RequestClass::Latency };
                let refs: Vec<Option<&ClusterSummary>> = self.summaries.iter().map(Option::as_ref).collect();
                let config = &self.configs[tag.origin.index()];
                rank_clusters(config, &refs, &self.dispatched, &ctx.request.model, class, ms(ctx.now)).map_or_else(
                    |_| Vec::new(),
                    |d| d.ranked.iter().filter_map(|c| NAMES.iter().position(|n| *n == c.cluster)).collect(),
                )
            }
            Layer::RoundRobin => {
                self.next += 1;
                vec![(self.next - 1) % 2]
            }
            Layer::RegionLocal => vec![tag.origin.index()],
        }
    }
}

impl Policy for GlobalLayer {
    fn name(&self) -> &'static str {
        self.layer.name()
    }

    fn on_scrape(&mut self, scrape: &ScrapeView, now: f64) {
        self.sequence += 1;
        let views = self.clusters.on_scrape(scrape, now);
        self.summaries = views
            .iter()
            .enumerate()
            .map(|(c, view)| {
                Some(summarize(&view.snapshot, NAMES[c], self.sequence, true, ms(now), ms(SCRAPE_INTERVAL_S)))
            })
            .collect();
        self.dispatched = vec![0, 0];
    }

    fn admit(&mut self, ctx: &PickContext<'_>) -> bool {
        let Some(tag) = self.tags.get(ctx.id).copied() else { return false };
        let order = self.order(ctx, tag);
        let chosen = order
            .into_iter()
            .find_map(|cluster| Some((cluster, self.clusters.route(cluster, ctx, criticality(&tag))?)));
        if let Some((cluster, _)) = chosen {
            self.dispatched[cluster] += 1;
            self.backlog.insert(ctx.id, (cluster, self.sequence));
        }
        self.chosen = chosen.map(|(_, pod)| pod);
        self.chosen.is_some()
    }

    fn pick(&mut self, _ctx: &PickContext<'_>) -> usize {
        self.chosen.take().unwrap_or(0)
    }

    fn on_first_token(&mut self, id: usize, pod: usize, request: &BenchRequest, at: f64) {
        self.clusters.on_first_token(id, pod, request, at);
    }

    fn on_finish(&mut self, id: usize, pod: usize) {
        self.clusters.on_finish(id, pod);
    }
}
