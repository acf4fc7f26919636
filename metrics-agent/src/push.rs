//! Pushes encoded snapshots to every gateway's control listener, and a cluster's
//! summaries to every global router's.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::join_all;

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

/// One gateway's push history.
#[derive(Debug, Clone, Copy, Default)]
struct History {
    /// When to try again after a failure, and the pause that led there.
    retry: Option<(Instant, Duration)>,
    last_success: Option<Instant>,
}

/// What happened to one gateway in one push.
#[derive(Debug)]
pub struct Attempt {
    /// `None` while the gateway's backoff has not elapsed: nothing was sent.
    pub result: Option<Result<(), PushError>>,
    /// Whether the gateway was failing before this push.
    pub was_failing: bool,
    /// The last accepted push, this one included: the age of what the gateway holds.
    pub last_success: Option<Instant>,
}

pub struct Pusher {
    client: reqwest::Client,
    targets: Vec<String>,
    token: ControlToken,
    timeout: Duration,
    history: Vec<History>,
}

impl Pusher {
    /// `targets` are control listener base URLs, e.g. `http://127.0.0.1:9902`; `path`
    /// is what is pushed there (`/v1/snapshot` or `/v1/summary`).
    pub fn new(
        client: reqwest::Client,
        targets: Vec<String>,
        path: &str,
        token: ControlToken,
        timeout: Duration,
    ) -> Self {
        let targets: Vec<String> = targets.into_iter().map(|t| format!("{}{path}", t.trim_end_matches('/'))).collect();
        let history = vec![History::default(); targets.len()];
        Self { client, targets, token, timeout, history }
    }

    pub fn targets(&self) -> &[String] {
        &self.targets
    }

    /// Pushes to all targets at once; one attempt per target, in order. A failing
    /// target is skipped until its backoff has elapsed.
    pub async fn push(&mut self, snapshot: Bytes) -> Vec<Attempt> {
        let now = Instant::now();
        let this = &*self;
        let results = join_all(this.targets.iter().zip(&this.history).map(|(url, history)| {
            let snapshot = snapshot.clone();
            async move {
                match history.retry {
                    Some((at, _)) if at > now => None,
                    _ => Some(this.push_one(url, snapshot).await),
                }
            }
        }))
        .await;
        let done = Instant::now();
        self.history
            .iter_mut()
            .zip(results)
            .map(|(history, result)| {
                let was_failing = history.retry.is_some();
                match &result {
                    Some(Ok(())) => *history = History { retry: None, last_success: Some(done) },
                    Some(Err(_)) => {
                        let pause = history.retry.map_or(FIRST_BACKOFF, |(_, last)| (last * 2).min(MAX_BACKOFF));
                        history.retry = Some((done + pause, pause));
                    }
                    None => {}
                }
                Attempt { result, was_failing, last_success: history.last_success }
            })
            .collect()
    }

    async fn push_one(&self, url: &str, snapshot: Bytes) -> Result<(), PushError> {
        let response = self
            .client
            .post(url)
            .timeout(self.timeout)
            .header("authorization", self.token.bearer_header())
            .header("content-type", "application/msgpack")
            .body(snapshot)
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
