//! Part 2: the same load generator against the model-sim HTTP fleet behind real Envoy,
//! with infergate, then with Envoy's own `round_robin`, `least_request` and `random`.
//! TTFT is measured at the client as the arrival of the first SSE chunk. The pods run
//! `time_scale` times slower than the engine model, and arrivals are stretched by the
//! same factor, so that virtual-time results compare with the discrete-event run.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use infergate_envoy_config::UpstreamPolicy;
use infergate_harness::{ModelSpec, Stack, StackSpec};
use serde_json::json;
use tokio::time::Instant;

use crate::request::{Arrival, BenchRequest};
use crate::results::{RequestOutcome, RunResult};
use crate::workloads::{BASE_MODEL, Scenario};

/// The policies of part 2, by report name.
pub const POLICIES: [(&str, UpstreamPolicy); 4] = [
    ("infergate", UpstreamPolicy::Infergate),
    ("round_robin", UpstreamPolicy::RoundRobin),
    ("least_request", UpstreamPolicy::LeastRequest),
    ("random", UpstreamPolicy::Random),
];

/// A request that never answers within this (real) time counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

pub async fn run(scenario: Arc<Scenario>, policy: UpstreamPolicy, time_scale: f64) -> RunResult {
    let mut models = vec![ModelSpec::base(BASE_MODEL, "fleet")];
    models.extend(scenario.adapters.iter().map(|a| ModelSpec::lora(a, "fleet", a)));
    let stack = Stack::start(StackSpec {
        pools: vec![("fleet", scenario.pods)],
        models,
        max_body_bytes: 8 * 1024 * 1024,
        profile: scenario.profile,
        time_scale,
        upstream_policy: policy,
        access_log: false,
        ..StackSpec::default()
    })
    .await;
    let client = reqwest::Client::builder().pool_max_idle_per_host(512).build().unwrap_or_default();
    let url = format!("{}/v1/chat/completions", stack.gateway_url);
    let outcomes = Arc::new(Mutex::new(vec![RequestOutcome::default(); scenario.requests.len()]));
    let mut followers: Vec<Vec<(usize, f64)>> = vec![Vec::new(); scenario.requests.len()];
    for (i, request) in scenario.requests.iter().enumerate() {
        if let Arrival::After { previous, think_s } = request.arrival {
            if let Some(list) = followers.get_mut(previous) {
                list.push((i, think_s));
            }
        }
    }
    let followers = Arc::new(followers);
    let start = Instant::now();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    for (i, request) in scenario.requests.iter().enumerate() {
        if let Arrival::At(at) = request.arrival {
            let due = start + Duration::from_secs_f64(at * time_scale);
            spawn_request(Ctx {
                id: i,
                due,
                start,
                time_scale,
                client: client.clone(),
                url: url.clone(),
                scenario: Arc::clone(&scenario),
                outcomes: Arc::clone(&outcomes),
                followers: Arc::clone(&followers),
                done: done_tx.clone(),
            });
        }
    }
    drop(done_tx);
    // Every request reports once, followers included.
    for _ in 0..scenario.requests.len() {
        if done_rx.recv().await.is_none() {
            break;
        }
    }
    drop(stack);
    let outcomes = outcomes.lock().map(|o| o.clone()).unwrap_or_default();
    RunResult::from_outcomes(&outcomes)
}

#[derive(Clone)]
struct Ctx {
    id: usize,
    due: Instant,
    start: Instant,
    time_scale: f64,
    client: reqwest::Client,
    url: String,
    scenario: Arc<Scenario>,
    outcomes: Arc<Mutex<Vec<RequestOutcome>>>,
    followers: Arc<Vec<Vec<(usize, f64)>>>,
    done: tokio::sync::mpsc::UnboundedSender<()>,
}

fn spawn_request(ctx: Ctx) {
    tokio::spawn(async move {
        tokio::time::sleep_until(ctx.due).await;
        let request = &ctx.scenario.requests[ctx.id];
        let virtual_now = |at: Instant| at.duration_since(ctx.start).as_secs_f64() / ctx.time_scale;
        let arrival = Instant::now();
        let (first, finished) = send(&ctx.client, &ctx.url, request).await;
        if let Ok(mut outcomes) = ctx.outcomes.lock() {
            if let Some(o) = outcomes.get_mut(ctx.id) {
                o.arrival = virtual_now(arrival);
                o.first_token = first.map(virtual_now);
                o.finished = finished.map(virtual_now);
                o.output_tokens = request.output_tokens;
            }
        }
        // A conversation goes on whether or not this turn succeeded, until the end.
        let end = finished.or(first).unwrap_or_else(Instant::now);
        let _ = ctx.done.send(());
        for &(next, think_s) in ctx.followers.get(ctx.id).map(Vec::as_slice).unwrap_or_default() {
            let due = end + Duration::from_secs_f64(think_s * ctx.time_scale);
            if virtual_now(due) <= ctx.scenario.duration_s {
                spawn_request(Ctx { id: next, due, ..ctx.clone() });
            } else {
                skip(next, &ctx);
            }
        }
    });
}

/// Marks a turn due after the end, and the turns after it, as not sent.
fn skip(first: usize, ctx: &Ctx) {
    let mut stack = vec![first];
    while let Some(id) = stack.pop() {
        if let Ok(mut outcomes) = ctx.outcomes.lock() {
            if let Some(o) = outcomes.get_mut(id) {
                o.not_sent = true;
            }
        }
        let _ = ctx.done.send(());
        stack.extend(ctx.followers.get(id).into_iter().flatten().map(|(next, _)| *next));
    }
}

/// Sends one streamed chat request; returns when the first chunk and the end arrived.
async fn send(client: &reqwest::Client, url: &str, request: &BenchRequest) -> (Option<Instant>, Option<Instant>) {
    let body = json!({
        "model": request.model,
        "messages": [{"role": "user", "content": String::from_utf8_lossy(&request.prompt)}],
        "max_tokens": request.output_tokens,
        "stream": true,
    });
    let attempt = async {
        let mut response = client.post(url).json(&body).send().await.ok()?;
        if !response.status().is_success() {
            return Some((None, None));
        }
        let mut first = None;
        while let Ok(Some(_chunk)) = response.chunk().await {
            first.get_or_insert_with(Instant::now);
        }
        Some((first, first.map(|_| Instant::now())))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, attempt).await.ok().flatten().unwrap_or((None, None))
}
