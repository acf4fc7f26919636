//! What the real-engine tests share: the gateway stack in front of real engine pods,
//! and the steps every engine's test takes with it (waiting for the pods to drain,
//! loading one pod straight, cutting a stream by killing its pod), so that the vLLM
//! and llama.cpp tests differ only where the engines do.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

use crate::engines::EnginePod;
use crate::{Reply, Stack, chat_body};

/// The gauges that say an engine is busy: its running (or processing) and its waiting
/// (or deferred) requests.
#[derive(Debug, Clone, Copy)]
pub struct BusySeries {
    pub running: &'static str,
    pub waiting: &'static str,
}

pub struct EngineStack {
    pub stack: Stack,
    pub pods: Vec<EnginePod>,
    pub client: reqwest::Client,
    pub busy: BusySeries,
}

/// Waits for every pod to answer `/health`, one after the other; says how long it took.
pub async fn wait_all_ready(pods: &mut [EnginePod], client: &reqwest::Client, engine: &str) {
    let started = Instant::now();
    for pod in pods.iter_mut() {
        pod.wait_ready(client).await;
    }
    eprintln!("{} {engine} pods ready after {:.1} s", pods.len(), started.elapsed().as_secs_f64());
}

impl EngineStack {
    /// The pod `address` names, by its index.
    pub fn index_of(&self, address: &str) -> Option<usize> {
        self.pods.iter().position(|p| p.address.to_string() == address)
    }

    pub async fn chat(&self, model: &str, prompt: &str, max_tokens: u64) -> Reply {
        self.stack.post("/v1/chat/completions", chat_body(model, prompt, max_tokens).to_string(), &[]).await
    }

    /// Waits until every pod reports no request running or waiting.
    pub async fn until_idle(&self) {
        let started = Instant::now();
        loop {
            let mut busy = 0.0;
            for pod in &self.pods {
                busy += pod.metric(&self.client, self.busy.running).await;
                busy += pod.metric(&self.client, self.busy.waiting).await;
            }
            if busy == 0.0 {
                return;
            }
            assert!(started.elapsed() < Duration::from_secs(180), "the pods did not drain");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Sends `count` long answers of `max_tokens` for `model` straight to pod `index`,
    /// past the gateway, and waits until its waiting gauge reaches `queued`; returns the
    /// load's responses to await.
    pub async fn load_pod_directly(
        &self,
        model: &str,
        index: usize,
        count: usize,
        max_tokens: u64,
        queued: f64,
    ) -> Vec<tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>> {
        let pod = &self.pods[index];
        let url = format!("http://{}/v1/chat/completions", pod.address);
        let load: Vec<_> = (0..count)
            .map(|i| {
                let body = json!({"model": model, "messages": [{"role": "user", "content": format!("Write a long story number {i}.")}],
                    "max_tokens": max_tokens, "ignore_eos": true});
                tokio::spawn(self.client.post(&url).json(&body).send())
            })
            .collect();
        let started = Instant::now();
        while pod.metric(&self.client, self.busy.waiting).await < queued {
            if started.elapsed() > Duration::from_secs(60) {
                panic!(
                    "pod {index} never queued {queued} requests:\n{}\n{}",
                    pod.metrics_text(&self.client).await,
                    pod.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        load
    }

    /// Starts a long stream of `model` through the gateway, kills its pod after the first
    /// few events, and checks that the client sees the stream end without `[DONE]`
    /// rather than hang. Returns the killed pod's index.
    pub async fn cut_a_stream_by_killing_its_pod(&mut self, model: &str) -> usize {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "Tell a long story."}],
            "max_tokens": 400, "ignore_eos": true, "stream": true});
        let response = self
            .stack
            .client()
            .post(format!("{}/v1/chat/completions", self.stack.gateway_url))
            .json(&body)
            .send()
            .await
            .expect("the stream's response");
        assert_eq!(response.status(), 200);
        let decision = response.headers().get("x-infergate-decision").and_then(|v| v.to_str().ok()).unwrap_or_default();
        let victim = self.index_of(&first_endpoint(decision)).expect("the streaming pod");
        let mut stream = response.bytes_stream();
        let mut received = String::new();
        while received.matches("data: ").count() < 3 {
            let chunk = stream.next().await.expect("a first few events").expect("an event chunk");
            received.push_str(&String::from_utf8_lossy(&chunk));
        }
        self.pods[victim].kill();
        let rest = tokio::time::timeout(Duration::from_secs(30), async {
            let mut rest = String::new();
            while let Some(chunk) = stream.next().await {
                match chunk {
                    Ok(bytes) => rest.push_str(&String::from_utf8_lossy(&bytes)),
                    Err(_) => break,
                }
            }
            rest
        })
        .await
        .expect("the cut stream ends");
        assert!(!rest.contains("[DONE]"), "the stream was cut");
        victim
    }
}

/// The pod the gateway chose, from the decision header.
pub fn chosen(reply: &Reply) -> String {
    first_endpoint(reply.header("x-infergate-decision").unwrap_or_default())
}

/// The first of a decision's ranked endpoints (`...; endpoints=a,b; ...`): the chosen one.
pub fn first_endpoint(decision: &str) -> String {
    let endpoints = decision.split("endpoints=").nth(1).unwrap_or_default();
    endpoints.split([',', ';']).next().unwrap_or_default().to_string()
}

/// The JSON events of a server-sent event stream, without `[DONE]`.
pub fn sse_events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// `count` common English words after `seed`: SmolLM2's tokenizer makes about one
/// token of each.
pub fn words(seed: &str, count: usize) -> String {
    const COMMON: [&str; 12] =
        ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "then", "sleeps"];
    let body: Vec<&str> = (0..count).map(|i| COMMON[i % COMMON.len()]).collect();
    format!("{seed}: {}", body.join(" "))
}
