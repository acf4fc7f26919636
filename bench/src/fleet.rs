//! The simulated fleet's routing view: its pods' addresses, the routing config, and the
//! scrape the metrics agent would make (every 100 ms, its default, unless a run says
//! otherwise) — rendered by the simulator's `/metrics` code and parsed by the agent's
//! own engine adapter and rate learner.

use infergate_core::config::{Engine as EngineKind, ModelConfig, PoolConfig, RoutingConfig, RoutingSettings};
use infergate_core::endpoint::Endpoint;
use infergate_core::snapshot::{PodSignals, PodState, PoolState, SNAPSHOT_VERSION, Snapshot};
use infergate_model_sim::engine::Engine;
use infergate_model_sim::server::MetricsFormat;
use infergate_model_sim::server::metrics_text::{MetricsView, render};
use infergate_signals::engines;
use infergate_signals::learn::RateLearner;

use crate::workloads::BASE_MODEL;

pub const POOL: &str = "fleet";
/// How often the agent scrapes, seconds.
pub const SCRAPE_INTERVAL_S: f64 = 0.1;

/// A stable address per pod index, for the policies that key on endpoints.
pub fn pod_endpoint(index: usize) -> Endpoint {
    let i = u16::try_from(index).unwrap_or(u16::MAX);
    Endpoint::new(std::net::SocketAddr::from(([10, 0, (i / 250) as u8, (i % 250) as u8 + 1], 8000)))
}

pub struct FleetConfig {
    pub endpoints: Vec<Endpoint>,
    pub routing: RoutingConfig,
}

impl FleetConfig {
    pub fn new(pods: usize, adapters: &[String]) -> Self {
        let endpoints: Vec<Endpoint> = (0..pods).map(pod_endpoint).collect();
        let mut models = vec![ModelConfig {
            name: BASE_MODEL.into(),
            pool: POOL.into(),
            adapter: None,
            criticality: Default::default(),
        }];
        models.extend(adapters.iter().map(|a| ModelConfig {
            name: a.clone(),
            pool: POOL.into(),
            adapter: Some(a.clone()),
            criticality: Default::default(),
        }));
        let routing = RoutingConfig {
            settings: RoutingSettings::default(),
            flow_control: Default::default(),
            pools: vec![PoolConfig {
                name: POOL.into(),
                metrics_path: None,
                engine: EngineKind::Vllm,
                endpoints: endpoints.clone(),
                discovery: None,
                profile: None,
                weights: None,
                disaggregation: None,
            }],
            models,
        };
        Self { endpoints, routing }
    }
}

/// One scrape of the whole fleet.
#[derive(Debug, Clone)]
pub struct ScrapeView {
    /// Per pod, what its `/metrics` said (`None` if it did not parse).
    pub signals: Vec<Option<PodSignals>>,
    /// The snapshot the agent would push.
    pub snapshot: Snapshot,
}

/// The agent's side: renders each pod's metrics and parses them back.
pub struct Scraper {
    learners: Vec<RateLearner>,
    sequence: u64,
}

impl Scraper {
    pub fn new(pods: usize) -> Self {
        Self { learners: (0..pods).map(|_| RateLearner::default()).collect(), sequence: 0 }
    }

    /// Scrapes `engines`, the fleet's first pods: a pod that has not joined yet is
    /// left out of the scrape, its learner and the snapshot's pool alike.
    pub fn scrape(&mut self, engines: &[Engine], fleet: &FleetConfig, now: f64) -> ScrapeView {
        let now_ms = (now * 1000.0) as u64;
        let mut signals = Vec::with_capacity(engines.len());
        let mut pods = Vec::with_capacity(engines.len());
        for ((engine, learner), &address) in engines.iter().zip(&mut self.learners).zip(&fleet.endpoints) {
            learner.count_attention(fleet.routing.settings.cost.attention_crossover_tokens);
            let view = MetricsView {
                model_name: BASE_MODEL,
                stats: engine.stats(now),
                ttft: &engine.ttft,
                itl: &engine.itl,
                prefill: &engine.prefill,
                profile: engine.profile(),
                dp_size: 1,
                now_s: now,
            };
            let text = render(MetricsFormat::Vllm, &view);
            let parsed = engines::scrape(EngineKind::Vllm, &text).ok().map(|scraped| {
                learner.observe(scraped.counters, now);
                let mut s = scraped.signals;
                learner.apply(&mut s);
                s
            });
            pods.push(PodState {
                address,
                ready: true,
                role: Default::default(),
                scraped_at_ms: Some(now_ms),
                signals: parsed.clone(),
            });
            signals.push(parsed);
        }
        self.sequence += 1;
        let mut routing = fleet.routing.clone();
        if engines.len() < fleet.endpoints.len() {
            for pool in &mut routing.pools {
                pool.endpoints.retain(|e| pods.iter().any(|p| p.address == *e));
            }
        }
        ScrapeView {
            signals,
            snapshot: Snapshot {
                version: SNAPSHOT_VERSION,
                sequence: self.sequence,
                created_at_ms: now_ms,
                routing,
                pools: vec![PoolState { name: POOL.into(), pods }],
                peers: Default::default(),
            },
        }
    }
}
