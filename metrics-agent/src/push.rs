//! Pushes encoded snapshots to every gateway's control listener.

use std::time::Duration;

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

pub struct Pusher {
    client: reqwest::Client,
    targets: Vec<String>,
    token: ControlToken,
    timeout: Duration,
}

impl Pusher {
    /// `targets` are control listener base URLs, e.g. `http://127.0.0.1:9902`.
    pub fn new(client: reqwest::Client, targets: Vec<String>, token: ControlToken, timeout: Duration) -> Self {
        let targets = targets.into_iter().map(|t| format!("{}{SNAPSHOT_PATH}", t.trim_end_matches('/'))).collect();
        Self { client, targets, token, timeout }
    }

    pub fn targets(&self) -> &[String] {
        &self.targets
    }

    /// Pushes to all targets at once; one result per target, in order.
    pub async fn push(&self, snapshot: &[u8]) -> Vec<Result<(), PushError>> {
        join_all(self.targets.iter().map(|url| self.push_one(url, snapshot))).await
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
