//! Pushes encoded snapshots to every gateway's control listener.

use std::time::{Duration, Instant};

use futures::future::join_all;
use infergate_core::filter_config::SNAPSHOT_PATH;

use crate::token::ControlToken;

#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("{0}")]
    Transport(String),
    #[error("refused with HTTP {status}: {body}")]
    Refused { status: u16, body: String },
}

/// A gateway that refuses pushes is retried with doubling pauses up to this; short,
/// because a restarted Envoy must get a snapshot soon.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
const FIRST_BACKOFF: Duration = Duration::from_millis(50);

pub struct Pusher {
    client: reqwest::Client,
    targets: Vec<String>,
    token: ControlToken,
    timeout: Duration,
    retry_at: Vec<Option<(Instant, Duration)>>,
}

impl Pusher {
    /// `targets` are control listener base URLs, e.g. `http://127.0.0.1:9902`.
    pub fn new(client: reqwest::Client, targets: Vec<String>, token: ControlToken, timeout: Duration) -> Self {
        let targets = targets.into_iter().map(|t| format!("{}{SNAPSHOT_PATH}", t.trim_end_matches('/'))).collect();
        let targets: Vec<String> = targets;
        let retry_at = vec![None; targets.len()];
        Self { client, targets, token, timeout, retry_at }
    }

    pub fn targets(&self) -> &[String] {
        &self.targets
    }

    /// Pushes to all targets at once; one result per target, in order, or `None` for
    /// a failing target whose backoff has not yet elapsed.
    pub async fn push(&mut self, snapshot: &[u8]) -> Vec<Option<Result<(), PushError>>> {
        let now = Instant::now();
        let this = &*self;
        let results = join_all(this.targets.iter().zip(&this.retry_at).map(|(url, retry)| async move {
            match retry {
                Some((at, _)) if *at > now => None,
                _ => Some(this.push_one(url, snapshot).await),
            }
        }))
        .await;
        for (retry, result) in self.retry_at.iter_mut().zip(&results) {
            match result {
                Some(Ok(())) => *retry = None,
                Some(Err(_)) => {
                    let pause = retry.map_or(FIRST_BACKOFF, |(_, last)| (last * 2).min(MAX_BACKOFF));
                    *retry = Some((Instant::now() + pause, pause));
                }
                None => {}
            }
        }
        results
    }

    async fn push_one(&self, url: &str, snapshot: &[u8]) -> Result<(), PushError> {
        let response = self
            .client
            .post(url)
            .timeout(self.timeout)
            .header("authorization", self.token.bearer_header())
            .header("content-type", "application/msgpack")
            .body(snapshot.to_vec())
            .send()
            .await
            .map_err(|e| PushError::Transport(e.to_string()))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let body = response.text().await.unwrap_or_default();
        Err(PushError::Refused { status: status.as_u16(), body: body.chars().take(300).collect() })
    }
}
