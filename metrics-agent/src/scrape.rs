//! Scrapes every pod concurrently, each under its own timeout, and assembles the
//! snapshot. A failed scrape keeps the pod's last signals and their scrape time, so
//! they age into "stale" in the filter instead of vanishing; a pod that refuses
//! connections is marked not ready.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use infergate_core::Endpoint;
use infergate_core::config::{Engine, InfergateConfig};
use infergate_core::snapshot::{PodState, PoolState, SNAPSHOT_VERSION, Snapshot};

use crate::engines::{self, Scraped};
use crate::learn::RateLearner;

#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("connection refused or unreachable: {0}")]
    Unreachable(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("HTTP status {0}")]
    Status(u16),
    #[error("{0}")]
    Other(String),
    #[error(transparent)]
    Signals(#[from] engines::SignalsError),
}

pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Fetches `/metrics` text from a URL.
pub async fn fetch_metrics(client: &reqwest::Client, url: &str, timeout: Duration) -> Result<String, ScrapeError> {
    let response = client.get(url).timeout(timeout).send().await.map_err(|e| classify(&e, timeout))?;
    if !response.status().is_success() {
        return Err(ScrapeError::Status(response.status().as_u16()));
    }
    response.text().await.map_err(|e| classify(&e, timeout))
}

fn classify(error: &reqwest::Error, timeout: Duration) -> ScrapeError {
    if error.is_timeout() {
        ScrapeError::Timeout(timeout)
    } else if error.is_connect() {
        ScrapeError::Unreachable(error.to_string())
    } else {
        ScrapeError::Other(error.to_string())
    }
}

async fn scrape_pod(
    client: &reqwest::Client,
    endpoint: Endpoint,
    engine: Engine,
    timeout: Duration,
) -> Result<Scraped, ScrapeError> {
    let text = fetch_metrics(client, &format!("http://{endpoint}/metrics"), timeout).await?;
    Ok(engines::scrape(engine, &text)?)
}

/// Keeps each pod's last good state between scrapes and numbers the snapshots.
pub struct FleetScraper {
    client: reqwest::Client,
    config: InfergateConfig,
    last: HashMap<Endpoint, PodState>,
    learners: HashMap<Endpoint, RateLearner>,
    failing: HashMap<Endpoint, String>,
    sequence: u64,
}

impl FleetScraper {
    pub fn new(client: reqwest::Client, config: InfergateConfig) -> Self {
        Self {
            client,
            config,
            last: HashMap::new(),
            learners: HashMap::new(),
            failing: HashMap::new(),
            // Start from the clock so that a restarted agent's sequence keeps rising.
            sequence: unix_ms(),
        }
    }

    pub fn config(&self) -> &InfergateConfig {
        &self.config
    }

    /// Pods whose last scrape failed.
    pub fn failing_pods(&self) -> impl Iterator<Item = &Endpoint> {
        self.failing.keys()
    }

    /// Scrapes all pods at once; the slowest pod costs at most the scrape timeout.
    pub async fn scrape(&mut self) -> Snapshot {
        let timeout = Duration::from_millis(self.config.agent.scrape_timeout_ms);
        let targets: Vec<(usize, Endpoint, Engine)> = self
            .config
            .pools
            .iter()
            .enumerate()
            .flat_map(|(i, pool)| pool.endpoints.iter().map(move |&e| (i, e, pool.engine)))
            .collect();
        let client = &self.client;
        let results =
            join_all(targets.iter().map(|&(_, endpoint, engine)| scrape_pod(client, endpoint, engine, timeout))).await;
        let now = unix_ms();
        let mut pools: Vec<PoolState> = self
            .config
            .pools
            .iter()
            .map(|p| PoolState { name: p.name.clone(), pods: Vec::with_capacity(p.endpoints.len()) })
            .collect();
        for ((pool_index, endpoint, _), result) in targets.into_iter().zip(results) {
            let state = self.update(endpoint, result, now);
            if let Some(pool) = pools.get_mut(pool_index) {
                pool.pods.push(state);
            }
        }
        self.sequence += 1;
        Snapshot {
            version: SNAPSHOT_VERSION,
            sequence: self.sequence,
            created_at_ms: now,
            routing: self.config.routing_config(),
            pools,
        }
    }

    fn update(&mut self, endpoint: Endpoint, result: Result<Scraped, ScrapeError>, now: u64) -> PodState {
        let state = match result {
            Ok(Scraped { mut signals, counters }) => {
                let learner = self.learners.entry(endpoint).or_default();
                learner.observe(counters, now as f64 / 1000.0);
                learner.apply(&mut signals);
                if self.failing.remove(&endpoint).is_some() {
                    tracing::info!(pod = %endpoint, "scrape recovered");
                }
                PodState { address: endpoint, ready: true, scraped_at_ms: Some(now), signals: Some(signals) }
            }
            Err(error) => {
                let message = error.to_string();
                if self.failing.get(&endpoint) != Some(&message) {
                    tracing::warn!(pod = %endpoint, error = %message, "scrape failed; keeping the last signals, which will go stale");
                    self.failing.insert(endpoint, message);
                }
                let previous = self.last.get(&endpoint);
                PodState {
                    address: endpoint,
                    ready: !matches!(error, ScrapeError::Unreachable(_)),
                    scraped_at_ms: previous.and_then(|p| p.scraped_at_ms),
                    signals: previous.and_then(|p| p.signals.clone()),
                }
            }
        };
        self.last.insert(endpoint, state.clone());
        state
    }
}
