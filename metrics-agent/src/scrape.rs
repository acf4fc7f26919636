//! Scrapes every pod concurrently, each under its own timeout, and assembles the
//! snapshot. A failed scrape keeps the pod's last signals and their scrape time, so
//! they age into "stale" in the filter instead of vanishing; a pod that refuses
//! connections is marked not ready.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use infergate_core::Endpoint;
use infergate_core::config::{Engine, InfergateConfig, PoolConfig};

use infergate_core::snapshot::{PodState, PoolState, SNAPSHOT_VERSION, Snapshot};
use infergate_signals::engines::{self, Scraped};
use infergate_signals::learn::RateLearner;

use crate::adapter_lists::{self, AdapterLists};
use crate::discovery::{Fleet, Target};

#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("connection refused or unreachable: {0}")]
    Unreachable(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("HTTP status {0}{hint}", hint = status_hint(*.0))]
    Status(u16),
    #[error("{0}")]
    Other(String),
    #[error(transparent)]
    Signals(#[from] engines::SignalsError),
}

/// What an engine means by a status on its metrics path, where it is known.
fn status_hint(status: u16) -> &'static str {
    match status {
        404 => "; the pod serves no metrics at this path: set the pool's `metrics_path`",
        501 => "; llama.cpp answers 501 when llama-server was started without --metrics",
        400 => "; llama.cpp in router mode answers 400 without ?model= in the metrics path",
        _ => "",
    }
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
    let body = response.bytes().await.map_err(|e| classify(&e, timeout))?;
    String::from_utf8(body.into()).map_err(|_| ScrapeError::Other("the metrics text is not UTF-8".into()))
}

pub(crate) fn classify(error: &reqwest::Error, timeout: Duration) -> ScrapeError {
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
    (engine, path): (Engine, &str),
    timeout: Duration,
) -> Result<(Scraped, u64), ScrapeError> {
    let text = fetch_metrics(client, &format!("http://{endpoint}{path}"), timeout).await?;
    let fingerprint = xxhash_rust::xxh64::xxh64(text.as_bytes(), 0);
    Ok((engines::scrape(engine, &text)?, fingerprint))
}

/// How long a failing pod is left alone: doubling from one interval up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

struct Failure {
    message: String,
    consecutive: u32,
    retry_at_ms: u64,
}

/// Keeps each pod's last good state between scrapes and numbers the snapshots.
pub struct FleetScraper {
    client: reqwest::Client,
    fleet: Fleet,
    targets: Vec<Target>,
    last: HashMap<Endpoint, PodState>,
    learners: HashMap<Endpoint, RateLearner>,
    failing: HashMap<Endpoint, Failure>,
    /// A fingerprint of each pod's last scrape text, since when it has read exactly so,
    /// and whether that was reported as frozen.
    unchanged: HashMap<Endpoint, (u64, u64, bool)>,
    /// The series each pod's engine did not report in its last scrape, once warned about.
    unknown: HashMap<Endpoint, Vec<&'static str>>,
    /// Pods whose scrape failed in the last round (pods left alone in backoff are not).
    failed_last_round: Vec<Endpoint>,
    /// The adapters each pod's model list has.
    adapter_lists: AdapterLists,
    sequence: u64,
}

impl FleetScraper {
    pub fn new(client: reqwest::Client, fleet: Fleet) -> Self {
        Self {
            client,
            targets: fleet.targets(),
            fleet,
            last: HashMap::new(),
            learners: HashMap::new(),
            failing: HashMap::new(),
            unchanged: HashMap::new(),
            unknown: HashMap::new(),
            failed_last_round: Vec::new(),
            adapter_lists: AdapterLists::default(),
            // Start from the clock so that a restarted agent's sequence keeps rising.
            sequence: unix_ms(),
        }
    }

    pub fn config(&self) -> &InfergateConfig {
        &self.fleet.config
    }

    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// Follows a new config or pod set; true if the pods to scrape changed. State of
    /// pods that left is dropped.
    pub fn set_fleet(&mut self, fleet: Fleet) -> bool {
        let targets = fleet.targets();
        let changed = targets != self.targets;
        self.fleet = fleet;
        self.targets = targets;
        if changed {
            let present: std::collections::HashSet<Endpoint> = self.targets.iter().map(|t| t.endpoint).collect();
            self.last.retain(|e, _| present.contains(e));
            self.learners.retain(|e, _| present.contains(e));
            self.failing.retain(|e, _| present.contains(e));
            self.unchanged.retain(|e, _| present.contains(e));
            self.unknown.retain(|e, _| present.contains(e));
            self.adapter_lists.retain(&present);
        }
        changed
    }

    /// Pods whose last scrape failed, backing off now or not.
    pub fn failing_pods(&self) -> impl Iterator<Item = &Endpoint> {
        self.failing.keys()
    }

    /// Pods whose scrape failed in the last round: one failed scrape each.
    pub fn failed_last_round(&self) -> &[Endpoint] {
        &self.failed_last_round
    }

    /// Scrapes all pods at once; the slowest pod costs at most the scrape timeout. A
    /// pod that keeps failing is retried less often, and keeps its last signals.
    pub async fn scrape(&mut self) -> Snapshot {
        let config = &self.fleet.config;
        let timeout = Duration::from_millis(config.agent.scrape_timeout_ms);
        let started = unix_ms();
        let client = &self.client;
        let failing = &self.failing;
        let lists = &self.adapter_lists;
        let declared: Vec<Vec<String>> = (0..config.pools.len()).map(|i| adapter_lists::declared(config, i)).collect();
        let results = join_all(self.targets.iter().map(|target| {
            let declared = declared.get(target.pool_index).map_or(&[][..], Vec::as_slice);
            async move {
                let path = config.pools.get(target.pool_index).map_or("/metrics", PoolConfig::metrics_path);
                if failing.get(&target.endpoint).is_some_and(|failure| failure.retry_at_ms > started) {
                    return (None, None);
                }
                let list = (!declared.is_empty() && lists.due(target.endpoint, started))
                    .then(|| adapter_lists::fetch(client, target.endpoint, timeout));
                let metrics = scrape_pod(client, target.endpoint, (target.engine, path), timeout);
                match list {
                    Some(list) => {
                        let (metrics, list) = futures::join!(metrics, list);
                        (Some(metrics), Some(list))
                    }
                    None => (Some(metrics.await), None),
                }
            }
        }))
        .await;
        let now = unix_ms();
        let mut pools: Vec<PoolState> =
            config.pools.iter().map(|p| PoolState { name: p.name.clone(), pods: Vec::new() }).collect();
        let routing = config.routing_config();
        let interval_ms = config.agent.scrape_interval_ms;
        let targets = self.targets.clone();
        self.failed_last_round.clear();
        for (target, (result, list)) in targets.into_iter().zip(results) {
            if let Some(list) = list {
                let declared = declared.get(target.pool_index).map_or(&[][..], Vec::as_slice);
                self.adapter_lists.record(target.endpoint, list, declared, now);
            }
            let state = match result {
                Some(result) => self.update(target.endpoint, result, now, interval_ms),
                None => self.last.get(&target.endpoint).cloned().unwrap_or_else(|| unscraped(target.endpoint)),
            };
            if let Some(pool) = pools.get_mut(target.pool_index) {
                pool.pods.push(PodState { role: target.role, ..state });
            }
        }
        self.sequence += 1;
        Snapshot {
            version: SNAPSHOT_VERSION,
            sequence: self.sequence,
            created_at_ms: now,
            routing,
            pools,
            peers: Default::default(),
        }
    }

    fn update(
        &mut self,
        endpoint: Endpoint,
        result: Result<(Scraped, u64), ScrapeError>,
        now: u64,
        interval_ms: u64,
    ) -> PodState {
        let state = match result {
            Ok((scraped, fingerprint)) => {
                let measured_at = self.measured_at(endpoint, &scraped, fingerprint, now);
                self.report_unknown(endpoint, &scraped.unknown);
                let Scraped { mut signals, counters, .. } = scraped;
                let learner = self.learners.entry(endpoint).or_default();
                learner.count_attention(self.fleet.config.routing.cost.attention_crossover_tokens);
                learner.observe(counters, now as f64 / 1000.0);
                learner.apply(&mut signals);
                signals.served_adapters = self.adapter_lists.served(endpoint, now);
                if let Some(failure) = self.failing.remove(&endpoint) {
                    tracing::info!(pod = %endpoint, after_failures = failure.consecutive, "scrape recovered");
                }
                PodState::scraped(endpoint, measured_at, signals)
            }
            Err(error) => {
                self.failed_last_round.push(endpoint);
                let message = error.to_string();
                let failure = self.failing.entry(endpoint).or_insert(Failure {
                    message: String::new(),
                    consecutive: 0,
                    retry_at_ms: 0,
                });
                failure.consecutive = failure.consecutive.saturating_add(1);
                let backoff = interval_ms.saturating_mul(1 << failure.consecutive.min(16).saturating_sub(1));
                let backoff = backoff.min(u64::try_from(MAX_BACKOFF.as_millis()).unwrap_or(u64::MAX));
                // Jitter spreads the retries of pods that failed together.
                failure.retry_at_ms = now + backoff / 2 + fastrand::u64(0..=backoff / 2);
                if failure.message != message {
                    tracing::warn!(pod = %endpoint, error = %message, "scrape failed; keeping the last signals, which will go stale; retrying with backoff");
                    failure.message = message;
                }
                let previous = self.last.get(&endpoint);
                PodState {
                    address: endpoint,
                    ready: !matches!(error, ScrapeError::Unreachable(_)),
                    role: previous.map(|p| p.role).unwrap_or_default(),
                    scraped_at_ms: previous.and_then(|p| p.scraped_at_ms),
                    signals: previous.and_then(|p| p.signals.clone()),
                }
            }
        };
        self.last.insert(endpoint, state.clone());
        state
    }
}

impl FleetScraper {
    /// Says once per pod, and again when it changes, which load signals its engine does
    /// not report: the router estimates them from its in-flight counts.
    fn report_unknown(&mut self, endpoint: Endpoint, unknown: &[&'static str]) {
        let known_before = self.unknown.get(&endpoint).is_some_and(|before| before.as_slice() == unknown);
        if known_before {
            return;
        }
        if unknown.is_empty() {
            if self.unknown.remove(&endpoint).is_some() {
                tracing::info!(pod = %endpoint, "the pod now reports every load signal");
            }
        } else {
            tracing::warn!(
                pod = %endpoint,
                missing = %unknown.join(", "),
                "the pod's metrics lack these series (its engine release does not export them, or has not set them yet): \
                 the router treats them as unknown and estimates them from the gateway's in-flight counts"
            );
            self.unknown.insert(endpoint, unknown.to_vec());
        }
    }

    /// When the pod's figures were last seen to move. A pod with requests running or
    /// waiting advances its counters and histograms at every engine step, so a busy pod
    /// whose scrape text is byte for byte the same as before is reporting frozen figures
    /// (a stuck engine loop behind a live HTTP server, a caching proxy): its signals keep
    /// the age of the last change and go stale. An idle pod legitimately reads the same.
    fn measured_at(&mut self, endpoint: Endpoint, scraped: &Scraped, fingerprint: u64, now: u64) -> u64 {
        // Without load gauges a pod cannot be told busy: its unchanged text is not frozen.
        let busy = scraped.signals.running.unwrap_or(0.0) + scraped.signals.waiting.unwrap_or(0.0) > 0.0;
        let (since, mut reported) = match self.unchanged.get(&endpoint) {
            Some((previous, since, reported)) if busy && *previous == fingerprint => (*since, *reported),
            _ => (now, false),
        };
        let unchanged_ms = now.saturating_sub(since);
        if unchanged_ms > self.fleet.config.routing.signal_max_age_ms && !reported {
            tracing::warn!(pod = %endpoint, unchanged_ms, "pod reports requests in progress but its metrics have not moved; its signals are stale until they do");
            reported = true;
        }
        self.unchanged.insert(endpoint, (fingerprint, since, reported));
        since
    }
}

/// A pod that was never scraped: listed so that the filter may send it load-only
/// traffic, with no signals.
fn unscraped(address: Endpoint) -> PodState {
    PodState { address, ready: true, role: Default::default(), scraped_at_ms: None, signals: None }
}
