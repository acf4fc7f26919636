//! Pushes encoded snapshots to every gateway's control listener, and a cluster's
//! summaries to every global router's. A snapshot push says how many gateway replicas
//! there are; with several, each answers with its digest for the others.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::join_all;
use infergate_core::wire::header::REPLICAS;
use infergate_core::wire::path::SNAPSHOT;

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
    /// `None` while the gateway's backoff has not elapsed: nothing was sent. On
    /// success, the body of the answer (a replica's digest, or empty).
    pub result: Option<Result<Bytes, PushError>>,
    /// Whether the gateway was failing before this push.
    pub was_failing: bool,
    /// The last accepted push, this one included: the age of what the gateway holds.
    pub last_success: Option<Instant>,
}

pub struct Pusher {
    client: reqwest::Client,
    path: String,
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
        let mut pusher =
            Self { client, path: path.to_string(), targets: Vec::new(), token, timeout, history: Vec::new() };
        pusher.set_targets(targets);
        pusher
    }

    pub fn targets(&self) -> &[String] {
        &self.targets
    }

    /// Pushes to these base URLs from now on. A target that stays keeps its backoff and
    /// its last success; a new one is pushed to at the next push.
    pub fn set_targets(&mut self, bases: impl IntoIterator<Item = String>) {
        let targets: Vec<String> =
            bases.into_iter().map(|base| format!("{}{}", base.trim_end_matches('/'), self.path)).collect();
        let history = targets
            .iter()
            .map(|target| {
                let kept = self.targets.iter().zip(&self.history).find(|(old, _)| *old == target);
                kept.map(|(_, history)| *history).unwrap_or_default()
            })
            .collect();
        self.targets = targets;
        self.history = history;
    }

    /// Pushes `body` to all targets at once; one attempt per target, in order. A
    /// failing target is skipped until its backoff has elapsed.
    pub async fn push(&mut self, body: Bytes) -> Vec<Attempt> {
        let bodies = vec![body; self.targets.len()];
        self.push_each(bodies).await
    }

    /// As [`Self::push`], with one body per target, in target order (each replica's
    /// snapshot carries the other replicas' digest). A missing body sends nothing.
    pub async fn push_each(&mut self, bodies: Vec<Bytes>) -> Vec<Attempt> {
        let now = Instant::now();
        let this = &*self;
        let results =
            join_all(this.targets.iter().zip(&this.history).zip(bodies).map(|((url, history), body)| async move {
                match history.retry {
                    Some((at, _)) if at > now => None,
                    _ => Some(this.push_one(url, body).await),
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
                    Some(Ok(_)) => *history = History { retry: None, last_success: Some(done) },
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

    async fn push_one(&self, url: &str, body: Bytes) -> Result<Bytes, PushError> {
        let mut request = self
            .client
            .post(url)
            .timeout(self.timeout)
            .header("authorization", self.token.bearer_header())
            .header("content-type", "application/msgpack");
        if self.path == SNAPSHOT {
            request = request.header(REPLICAS, self.targets.len());
        }
        let response = request.body(body).send().await.map_err(|e| PushError::Transport(e.to_string()))?;
        let status = response.status();
        if status.is_success() {
            return response.bytes().await.map_err(|e| PushError::Transport(format!("reading the answer: {e}")));
        }
        let body = response.text().await.unwrap_or_default();
        Err(PushError::Refused { status: status.as_u16(), body: body.chars().take(300).collect() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing listens on port 1: a push there fails at once.
    const DEAD: &str = "http://127.0.0.1:1";

    fn pusher(targets: &[&str]) -> Pusher {
        let token = ControlToken::new("t").unwrap();
        let targets = targets.iter().map(|t| t.to_string()).collect();
        Pusher::new(reqwest::Client::new(), targets, "/v1/snapshot", token, Duration::from_millis(200))
    }

    #[tokio::test]
    async fn a_kept_target_keeps_its_backoff_and_a_new_one_is_tried_at_once() {
        let mut pusher = pusher(&[DEAD]);
        let first = pusher.push(Bytes::from_static(b"x")).await;
        assert!(matches!(first[0].result, Some(Err(_))));
        pusher.set_targets([DEAD.to_string(), "http://127.0.0.1:2/".to_string()]);
        assert_eq!(pusher.targets(), ["http://127.0.0.1:1/v1/snapshot", "http://127.0.0.1:2/v1/snapshot"]);
        let second = pusher.push(Bytes::from_static(b"x")).await;
        assert!(second[0].result.is_none(), "the failing target was pushed to again before its backoff");
        assert!(second[0].was_failing);
        assert!(matches!(second[1].result, Some(Err(_))), "the new target was not tried");
        pusher.set_targets(Vec::new());
        assert!(pusher.push(Bytes::from_static(b"x")).await.is_empty());
    }
}
