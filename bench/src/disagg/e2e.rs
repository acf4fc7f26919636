//! A P/D request set through real Envoy: the filter in `mode: gateway` with
//! `split: predicted`, the release agent, and model-sim pods that only prefill or only
//! decode, so that the discrete-event prediction of `pd/infergate` can be checked
//! against what a client sees.
//!
//! As in part 2 (`crate::e2e`), the pods run `time_scale` times slower than the engine
//! model and arrivals and think times are stretched alike; every time the client
//! measures is divided by the scale back into simulated time. Two things of the
//! gateway's also run in real time and are scaled here so that they mean what the
//! simulator's do: the agent scrapes every [`SCRAPE_INTERVAL_S`] simulated seconds
//! (`time_scale` × 100 ms real), and the pool's `transfer_gb_per_s` is the link's
//! bandwidth divided by the scale, since the router weighs the transfer against TTFTs
//! it learned from the pods' real-time histograms.
//!
//! The client reads each answer's SSE events as they arrive and stamps every token
//! event; the gaps between a request's consecutive tokens are its inter-token
//! latencies. Events that arrive in one read share a stamp and are counted as
//! coalesced, so that a gap of zero that the network made is visible as such. The
//! decision header says whether the request was split and where its prefill leg went;
//! a split's moved tokens are the gateway's `uncached_tokens`, since the pods count
//! transfers only in aggregate.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use infergate_core::config::{DisaggMode, Disaggregation, SplitPolicy};
use infergate_core::wire::header::{DECISION, SERVED_BY};
use infergate_harness::{ModelSpec, PodShaper, Stack, StackSpec, procfs};
use infergate_model_sim::server::{KvRole, PdSettings, PodSpec};
use serde::Serialize;
use tokio::time::Instant;

use super::fleet::Link;
use super::sim::PdOutcome;
use crate::des::followers_of;
use crate::e2e::{REQUEST_TIMEOUT, chat_body};
use crate::fleet::{POOL, SCRAPE_INTERVAL_S};
use crate::request::{Arrival, BenchRequest};
use crate::workloads::{BASE_MODEL, Scenario};

/// Envoy's worker threads.
pub const ENVOY_WORKERS: u32 = 2;

/// What one run through Envoy measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Per request, in request order, in simulated time: what `summarize` reads.
    pub outcomes: Vec<PdOutcome>,
    pub trace: Vec<TraceLine>,
    pub load: MachineLoad,
}

/// One request as the client saw it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TraceLine {
    pub id: usize,
    /// Simulated seconds from the start.
    pub arrival_s: f64,
    pub status: u16,
    /// Simulated ms.
    pub ttft_ms: Option<f64>,
    /// The p90 of its own inter-token gaps, simulated ms.
    pub itl_p90_ms: Option<f64>,
    pub tokens: u32,
    /// Token events that arrived in the same read as the one before them.
    pub coalesced: u32,
    /// `split`, `whole`, or none when the header had no `pd=`.
    pub pd: Option<String>,
    /// `pd_fallback=` of the decision: a split the filter served whole after all.
    pub fallback: Option<String>,
    pub served_by: Option<String>,
    pub prefill: Option<String>,
    /// How late the client sent it, real ms.
    pub send_lag_ms: f64,
    /// The split verdict of the gateway's `x-infergate-decision`, from `pd=` on.
    pub verdict: Option<String>,
    /// The discrete-event run's figures for the same request, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted: Option<PredictedLine>,
}

/// One request in the discrete-event run, beside its [`TraceLine`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct PredictedLine {
    pub ttft_ms: Option<f64>,
    pub itl_p90_ms: Option<f64>,
    pub split: bool,
}

impl PredictedLine {
    pub fn of(outcome: &PdOutcome) -> Self {
        Self {
            ttft_ms: outcome.first_token.map(|t| 1000.0 * (t - outcome.arrival)),
            itl_p90_ms: (!outcome.gaps.is_empty()).then(|| super::request_itl_p90_ms(outcome)),
            split: outcome.split(),
        }
    }
}

/// Whether the machine kept up: CPU of each process over the run, and how late the
/// client sent requests.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MachineLoad {
    pub wall_s: f64,
    /// CPU seconds per wall second (1.0 = one core busy).
    pub bench_cores: f64,
    pub envoy_cores: f64,
    pub agent_cores: f64,
    pub send_lag_p99_ms: f64,
    pub send_lag_max_ms: f64,
}

/// The stack of a fleet of `scenario.pods` whose first `prefill` pods only prefill.
fn stack_spec(scenario: &Scenario, prefill: usize, link: Link, time_scale: f64) -> StackSpec {
    let pd = PdSettings {
        kv_bytes_per_token: link.kv_bytes_per_token,
        transfer_gb_per_s: link.gb_per_s,
        ..PdSettings::default()
    };
    let shaper = PodShaper(Arc::new(move |index, spec: PodSpec| {
        let role = if index < prefill { KvRole::Producer } else { KvRole::Consumer };
        PodSpec { pd: PdSettings { role, ..pd.clone() }, ..spec }
    }));
    let disaggregation = Disaggregation {
        mode: DisaggMode::Gateway,
        split: SplitPolicy::Predicted,
        kv_bytes_per_token: link.kv_bytes_per_token,
        transfer_gb_per_s: link.gb_per_s / time_scale,
        prefill_timeout_ms: REQUEST_TIMEOUT.as_millis() as u64,
        ..Disaggregation::default()
    };
    StackSpec {
        pools: vec![(POOL, scenario.pods)],
        models: vec![ModelSpec::base(BASE_MODEL, POOL)],
        max_body_bytes: 8 * 1024 * 1024,
        profile: scenario.profile,
        envoy_concurrency: ENVOY_WORKERS,
        time_scale,
        access_log: false,
        scrape_interval_ms: (SCRAPE_INTERVAL_S * 1000.0 * time_scale).round() as u64,
        request_timeout_ms: REQUEST_TIMEOUT.as_millis() as u64,
        disaggregation: Some((disaggregation, prefill)),
        pod_shaper: Some(shaper),
        ..StackSpec::default()
    }
}

/// Plays `scenario` through Envoy on `prefill` prefill pods and the rest decode pods.
pub async fn run(scenario: Arc<Scenario>, prefill: usize, link: Link, time_scale: f64) -> Measured {
    let stack = Stack::start(stack_spec(&scenario, prefill, link, time_scale)).await;
    let client = reqwest::Client::builder().pool_max_idle_per_host(512).build().unwrap_or_default();
    let shared = Arc::new(Shared {
        url: format!("{}/v1/chat/completions", stack.gateway_url),
        client,
        pods: stack.fleet.pods.iter().map(ToString::to_string).collect(),
        followers: followers_of(&scenario.requests),
        results: Mutex::new(vec![(PdOutcome::default(), TraceLine::default()); scenario.requests.len()]),
        start: Instant::now(),
        time_scale,
        scenario: Arc::clone(&scenario),
    });
    let pids = [Some(std::process::id()), stack.envoy_pid(), stack.agent_pid()];
    let cpu_before = pids.map(|p| p.and_then(procfs::cpu_seconds).unwrap_or(0.0));
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    for (id, request) in scenario.requests.iter().enumerate() {
        if let Arrival::At(at) = request.arrival {
            let due = shared.start + Duration::from_secs_f64(at * time_scale);
            tokio::spawn(play(Arc::clone(&shared), id, due, done_tx.clone()));
        }
    }
    drop(done_tx);
    for _ in 0..scenario.requests.len() {
        if done_rx.recv().await.is_none() {
            break;
        }
    }
    let wall_s = shared.start.elapsed().as_secs_f64();
    let cpu_after = pids.map(|p| p.and_then(procfs::cpu_seconds).unwrap_or(0.0));
    let cores = |i: usize| (cpu_after.get(i).unwrap_or(&0.0) - cpu_before.get(i).unwrap_or(&0.0)) / wall_s.max(1e-9);
    drop(stack);
    let results = shared.results.lock().map(|r| r.clone()).unwrap_or_default();
    let (outcomes, trace): (Vec<PdOutcome>, Vec<TraceLine>) = results.into_iter().unzip();
    let mut lags: Vec<f64> = trace.iter().filter(|l| l.status != 0).map(|l| l.send_lag_ms).collect();
    lags.sort_by(f64::total_cmp);
    let lag_at = |q: f64| lags.get(((q * lags.len() as f64).ceil() as usize).max(1) - 1).copied().unwrap_or(0.0);
    let load = MachineLoad {
        wall_s,
        bench_cores: cores(0),
        envoy_cores: cores(1),
        agent_cores: cores(2),
        send_lag_p99_ms: lag_at(0.99),
        send_lag_max_ms: lags.last().copied().unwrap_or(0.0),
    };
    let trace = trace.into_iter().zip(&outcomes).filter(|(_, o)| !o.not_sent).map(|(t, _)| t).collect();
    Measured { outcomes, trace, load }
}

/// What every request's task shares.
struct Shared {
    url: String,
    client: reqwest::Client,
    /// The pods' addresses, in `PdOutcome` pod order.
    pods: Vec<String>,
    followers: std::collections::HashMap<usize, Vec<(usize, f64)>>,
    results: Mutex<Vec<(PdOutcome, TraceLine)>>,
    start: Instant,
    time_scale: f64,
    scenario: Arc<Scenario>,
}

impl Shared {
    fn virtual_s(&self, at: Instant) -> f64 {
        at.duration_since(self.start).as_secs_f64() / self.time_scale
    }

    fn pod_index(&self, pod: Option<&str>) -> Option<usize> {
        pod.and_then(|pod| self.pods.iter().position(|p| p == pod))
    }

    /// Marks `first` and the turns after it as not sent.
    fn skip(&self, first: usize, done: &tokio::sync::mpsc::UnboundedSender<()>) {
        for id in crate::des::conversation_from(first, &self.followers) {
            if let Some(slot) = self.results.lock().ok().as_mut().and_then(|r| r.get_mut(id)) {
                slot.0.not_sent = true;
            }
            let _ = done.send(());
        }
    }
}

/// Sends request `id` at `due`, records it, then starts its conversation's next turns.
fn play(
    shared: Arc<Shared>,
    id: usize,
    due: Instant,
    done: tokio::sync::mpsc::UnboundedSender<()>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        tokio::time::sleep_until(due).await;
        let Some(request) = shared.scenario.requests.get(id) else { return };
        let sent = Instant::now();
        let answer = send(&shared.client, &shared.url, request).await;
        let end = answer.tokens.last().copied().unwrap_or_else(Instant::now);
        record(&shared, id, request, sent, due, &answer);
        let _ = done.send(());
        for &(next, think_s) in shared.followers.get(&id).map(Vec::as_slice).unwrap_or_default() {
            let at = end + Duration::from_secs_f64(think_s * shared.time_scale);
            if shared.virtual_s(at) <= shared.scenario.duration_s {
                tokio::spawn(play(Arc::clone(&shared), next, at, done.clone()));
            } else {
                shared.skip(next, &done);
            }
        }
    })
}

fn record(shared: &Shared, id: usize, request: &BenchRequest, sent: Instant, due: Instant, answer: &Answer) {
    let to_ms = |from: Instant, to: Instant| to.duration_since(from).as_secs_f64() * 1000.0 / shared.time_scale;
    let gaps: Vec<f32> = answer
        .tokens
        .windows(2)
        .map(|w| (w[1].duration_since(w[0]).as_secs_f64() / shared.time_scale) as f32)
        .collect();
    // The split verdict's part of the decision: `pd=split reason=… prefill=<pod>; …`.
    let decision = answer.decision.as_deref().unwrap_or_default();
    let verdict = decision.split_once("; pd=").map_or("", |(_, rest)| rest);
    let words = || verdict.split([';', ' ']).map(str::trim).filter(|w| !w.is_empty());
    let part = |key: &str| words().find_map(|w| w.strip_prefix(key)).map(str::to_string);
    let pd = words().next().map(str::to_string);
    let fallback = part("pd_fallback=");
    let prefill = part("prefill=").filter(|_| pd.as_deref() == Some("split") && fallback.is_none());
    // What the gateway expected to move, for a split: the pods do not say per request.
    let moved = part("uncached_tokens=").and_then(|t| t.parse::<f64>().ok()).filter(|_| prefill.is_some());
    let finished = answer.status == 200 && answer.complete && !answer.tokens.is_empty();
    let outcome = PdOutcome {
        arrival: shared.virtual_s(sent),
        first_token: answer.tokens.first().filter(|_| finished).map(|&t| shared.virtual_s(t)),
        finished: answer.tokens.last().filter(|_| finished).map(|&t| shared.virtual_s(t)),
        output_tokens: request.output_tokens,
        decode_pod: shared.pod_index(answer.served_by.as_deref()).unwrap_or(usize::MAX),
        prefill_pod: shared.pod_index(prefill.as_deref()),
        transferred_tokens: moved.map_or(0, |t| t as u64),
        gaps,
        ..PdOutcome::default()
    };
    let line = TraceLine {
        id,
        arrival_s: outcome.arrival,
        status: answer.status,
        ttft_ms: answer.tokens.first().map(|&t| to_ms(sent, t)),
        itl_p90_ms: (!outcome.gaps.is_empty()).then(|| super::request_itl_p90_ms(&outcome)),
        tokens: answer.tokens.len() as u32,
        coalesced: answer.coalesced,
        pd,
        fallback,
        served_by: answer.served_by.clone(),
        prefill,
        send_lag_ms: sent.duration_since(due).as_secs_f64() * 1000.0,
        verdict: (!verdict.is_empty()).then(|| format!("pd={verdict}")),
        predicted: None,
    };
    if let Some(slot) = shared.results.lock().ok().as_mut().and_then(|r| r.get_mut(id)) {
        *slot = (outcome, line);
    }
}

/// One streamed answer: its status, when each token event arrived, and the headers.
#[derive(Debug, Default)]
struct Answer {
    status: u16,
    tokens: Vec<Instant>,
    coalesced: u32,
    /// The stream ended with `[DONE]`.
    complete: bool,
    served_by: Option<String>,
    decision: Option<String>,
}

/// Sends one streamed chat request and stamps its token events.
async fn send(client: &reqwest::Client, url: &str, request: &BenchRequest) -> Answer {
    let mut answer = Answer::default();
    let attempt = async {
        let Ok(mut response) = client.post(url).json(&chat_body(request)).send().await else { return };
        answer.status = response.status().as_u16();
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(String::from);
        answer.served_by = header(SERVED_BY);
        answer.decision = header(DECISION);
        let mut events = SseEvents::default();
        while let Ok(Some(chunk)) = response.chunk().await {
            let now = Instant::now();
            let tokens = events.feed(&chunk);
            answer.coalesced += tokens.saturating_sub(1);
            answer.tokens.extend(std::iter::repeat_n(now, tokens as usize));
        }
        answer.complete = events.done;
    };
    let _ = tokio::time::timeout(REQUEST_TIMEOUT, attempt).await;
    answer
}

/// Splits an SSE byte stream into events, across reads.
#[derive(Debug, Default)]
struct SseEvents {
    pending: Vec<u8>,
    /// `data: [DONE]` came.
    done: bool,
}

impl SseEvents {
    /// Takes one read; returns how many token events it completed.
    fn feed(&mut self, bytes: &[u8]) -> u32 {
        self.pending.extend_from_slice(bytes);
        let mut tokens = 0;
        while let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = self.pending.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&event);
            let data = text.trim().strip_prefix("data:").map(str::trim).unwrap_or_default();
            if data == "[DONE]" {
                self.done = true;
            } else if data.contains("\"choices\":[{") {
                tokens += 1;
            }
        }
        tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_events_split_across_reads_count_once_when_they_end() {
        let mut events = SseEvents::default();
        let token = r#"data: {"choices":[{"index":0,"delta":{"content":"tok "}}]}"#;
        assert_eq!(events.feed(format!("{token}\n\n{}", &token[..10]).as_bytes()), 1);
        assert_eq!(events.feed(format!("{}\n", &token[10..]).as_bytes()), 0);
        assert_eq!(events.feed(b"\n"), 1);
        assert!(!events.done);
        assert_eq!(events.feed(format!("{token}\n\n{token}\n\ndata: [DONE]\n\n").as_bytes()), 2);
        assert!(events.done);
    }

    #[test]
    fn a_usage_event_is_not_a_token() {
        let mut events = SseEvents::default();
        assert_eq!(events.feed(b"data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\n"), 0);
    }
}
