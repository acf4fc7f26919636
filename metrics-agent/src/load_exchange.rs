//! The load exchange between snapshots: every few milliseconds, each gateway replica
//! gets the other replicas' in-flight load, summed per pod, and answers with its own
//! (`POST /v1/load`, `infergate_core::replicas::ReplicaLoad`).
//!
//! Snapshots carry the same loads, but one to two scrape intervals late: requests that
//! reach two replicas within that window were decided blind to each other, and cold
//! prefills from three replicas piled onto the same idle pods (`docs/replicas.md`).
//! The pushes are staggered, one replica per `interval / replicas`, so that each is
//! told loads at most one interval old, and never wait on each other: a replica that
//! fails is left alone for [`FAILED_PAUSE`] while the others go on.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use infergate_core::replicas::ReplicaLoad;
use infergate_core::wire::path::{LOAD, SNAPSHOT};

use crate::replicas::ReplicaExchange;
use crate::telemetry::Telemetry;
use crate::token::ControlToken;

/// How long a replica whose load push failed is left alone.
pub const FAILED_PAUSE: Duration = Duration::from_secs(1);

pub struct LoadExchange {
    pub client: reqwest::Client,
    pub token: ControlToken,
    /// Between two pushes to the same replica.
    pub interval: Duration,
    pub exchange: Arc<Mutex<ReplicaExchange>>,
    pub telemetry: Arc<Telemetry>,
}

impl LoadExchange {
    /// Pushes until the task is dropped. With fewer than two replicas it only waits.
    pub async fn run(self) {
        let mut paused: Vec<(String, Instant)> = Vec::new();
        // Replicas whose last push failed: logged once, until one succeeds.
        let mut failing: Vec<String> = Vec::new();
        let mut turn = 0usize;
        let mut next = tokio::time::Instant::now();
        loop {
            let targets: Vec<String> = self.lock().targets().map(str::to_string).collect();
            let replicas = targets.len();
            next += if replicas < 2 { self.interval } else { self.interval / replicas as u32 };
            let now = tokio::time::Instant::now();
            if next < now {
                // Fell behind (a slow replica): skip the missed turns rather than burst.
                next = now;
            }
            if replicas >= 2 {
                turn = (turn + 1) % replicas;
                let now = Instant::now();
                paused.retain(|(_, until)| *until > now);
                let target = targets.get(turn).filter(|t| !paused.iter().any(|(p, _)| p == *t));
                if let Some(target) = target {
                    let was_failing = failing.iter().any(|f| f == target);
                    match self.push(target).await {
                        Ok(()) if was_failing => {
                            failing.retain(|f| f != target);
                            tracing::info!(%target, "load pushes recovered");
                        }
                        Ok(()) => {}
                        Err(error) => {
                            self.telemetry.load_push_errors.inc();
                            if !was_failing {
                                tracing::warn!(%target, %error, "load push failed; retrying every second");
                                failing.push(target.clone());
                            }
                            paused.push((target.clone(), Instant::now() + FAILED_PAUSE));
                        }
                    }
                }
            }
            tokio::time::sleep_until(next).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReplicaExchange> {
        self.exchange.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One push to the replica whose snapshot target is `target`. The replicas may
    /// change meanwhile: each side looks it up by target under one lock.
    async fn push(&self, target: &str) -> Result<(), String> {
        let url = format!("{}{LOAD}", target.strip_suffix(SNAPSHOT).unwrap_or(target));
        let load = {
            let exchange = self.lock();
            let Some(index) = exchange.targets().position(|t| t == target) else { return Ok(()) };
            exchange.load_for(index, Instant::now())
        };
        let body = ReplicaLoad { load }.encode();
        let response = self
            .client
            .post(&url)
            .timeout(self.interval.max(Duration::from_millis(50)))
            .header("authorization", self.token.bearer_header())
            .header("content-type", "application/msgpack")
            .body(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let answer = response.bytes().await.map_err(|e| format!("reading the answer: {e}"))?;
        if !status.is_success() {
            return Err(format!("refused with HTTP {status}: {}", String::from_utf8_lossy(&answer)));
        }
        let own = ReplicaLoad::decode(&answer).map_err(|e| e.to_string())?;
        let mut exchange = self.lock();
        let index = exchange.targets().position(|t| t == target);
        if let Some(index) = index {
            exchange.loaded(index, own.load, Instant::now());
        }
        self.telemetry.load_pushes.inc();
        Ok(())
    }
}
