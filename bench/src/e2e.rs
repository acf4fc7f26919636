//! Part 2: the same load generator against the model-sim HTTP fleet behind real Envoy,
//! with infergate, then with Envoy's own `round_robin`, `least_request` and `random`,
//! and (`make bench-peers`) behind the peers' own routers run as gateways of their own.
//! Every turn of a conversation or agent session names its session in
//! [`SESSION_HEADER`], to every gateway alike.
//! TTFT is measured at the client as the arrival of the first SSE chunk. The pods run
//! `time_scale` times slower than the engine model, and arrivals are stretched by the
//! same factor, so that virtual-time results compare with the discrete-event run.
//!
//! infergate also runs with several gateway replicas (separate Envoys, one agent): the
//! client sends each conversation's first turn to replica `id mod N` and each next turn
//! to the replica after the previous turn's, so consecutive turns never share one.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use infergate_core::config::GatewaySettings;
use infergate_envoy_config::UpstreamPolicy;
use infergate_harness::fleet::Fleet;
use infergate_harness::peer_router::{PeerGateway, SESSION_HEADER};
use infergate_harness::{ModelSpec, Stack, StackSpec};
use infergate_model_sim::server::PodSpec;
use serde_json::json;
use tokio::time::Instant;

use infergate_core::wire::header::{DECISION, SERVED_BY};

use crate::engine_runs;
use crate::peers::{KV_AWARE_SESSION_TTL_S, PeerRouterKind};
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

/// Envoy's worker threads in part 2 (each replica's), as the prediction models them.
pub const ENVOY_WORKERS: u32 = 2;

/// How often part 2's agent scrapes the pods and pushes, real milliseconds; its
/// discrete-event prediction scrapes as often in the pods' time (this divided by the
/// time scale).
pub const SCRAPE_INTERVAL_MS: u64 = 50;

/// How often part 2's agent pushes each replica the others' load between snapshots
/// (the agent's default), real milliseconds; divided by the time scale as above.
pub const LOAD_EXCHANGE_MS: u64 = 5;

/// A request that never answers within this (real) time counts as failed.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// What one run through Envoy measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// With the pods' own prefix-cache hit rate in `prefix_hit_rate`.
    pub result: RunResult,
    /// Where the conversations' follow-up turns went.
    pub follow_ups: FollowUps,
    /// One line per request sent, in request order.
    pub trace: Vec<TraceLine>,
}

/// One request as the client and the gateway saw it: enough to explain a slow one.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TraceLine {
    pub id: usize,
    /// The conversation's previous turn, for a follow-up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<usize>,
    pub replica: usize,
    /// Simulated seconds from the start.
    pub arrival_s: f64,
    /// The pod that answered.
    pub pod: Option<String>,
    /// Measured at the client, simulated ms.
    pub ttft_ms: Option<f64>,
    /// What the gateway predicted for the chosen pod, simulated ms.
    pub predicted_ttft_ms: Option<f64>,
    /// The age of the snapshot the decision used, real ms.
    pub snapshot_age_ms: Option<f64>,
    /// The gateway's whole `x-infergate-decision` (infergate only).
    pub decision: Option<String>,
}

/// The number after `key=` in a decision explanation, first occurrence.
fn explained(decision: &str, key: &str) -> Option<f64> {
    let start = decision.find(key)? + key.len();
    let rest = decision.get(start..)?;
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    rest.get(..end)?.parse().ok()
}

pub async fn run(scenario: Arc<Scenario>, policy: UpstreamPolicy, time_scale: f64, replicas: usize) -> Measured {
    let mut models = vec![ModelSpec::base(BASE_MODEL, "fleet")];
    models.extend(scenario.adapters.iter().map(|a| ModelSpec::lora(a, "fleet", a)));
    let stack = Stack::start(StackSpec {
        pools: vec![("fleet", scenario.pods)],
        models,
        max_body_bytes: 8 * 1024 * 1024,
        profile: scenario.profile,
        envoy_concurrency: ENVOY_WORKERS,
        time_scale,
        upstream_policy: policy,
        access_log: false,
        replicas,
        scrape_interval_ms: SCRAPE_INTERVAL_MS,
        // The product's default, not the tests' 30 s: an agentic call of 100k tokens
        // and more can take longer than that, and the peers' routers wait 30 minutes.
        request_timeout_ms: GatewaySettings::default().request_timeout_ms,
        ..StackSpec::default()
    })
    .await;
    let urls: Vec<String> = stack.gateway_urls().iter().map(|g| format!("{g}/v1/chat/completions")).collect();
    let measured = drive(&scenario, urls, &stack.fleet.pods, time_scale).await;
    drop(stack);
    measured
}

/// The same requests through one of the peers' own routers, run as its own gateway in
/// front of fresh pods of the scenario's fleet (`log_dir` keeps the router's log). For
/// `kv_aware`, the pods publish their KV events on loopback ports of their own.
pub async fn run_peer(
    scenario: Arc<Scenario>,
    kind: PeerRouterKind,
    time_scale: f64,
    log_dir: &Path,
) -> Result<Measured, String> {
    let publish = kind.needs_kv_events();
    let endpoints: Vec<String> =
        (0..scenario.pods).map(|_| format!("tcp://127.0.0.1:{}", infergate_harness::stack::free_port())).collect();
    let shaped = endpoints.clone();
    let publishing = move |index: usize, spec: PodSpec| PodSpec {
        kv_events: publish.then(|| shaped.get(index).cloned()).flatten(),
        ..spec
    };
    let fleet = Fleet::start_shaped(
        scenario.pods,
        scenario.profile,
        time_scale,
        &[BASE_MODEL.to_string()],
        &scenario.adapters,
        &publishing,
    )
    .await;
    let kv_events: Vec<(SocketAddr, String)> =
        if publish { fleet.pods.iter().copied().zip(endpoints).collect() } else { Vec::new() };
    let has_sessions = scenario.requests.iter().any(|r| matches!(r.arrival, Arrival::After { .. }));
    let ttl = has_sessions.then_some(KV_AWARE_SESSION_TTL_S);
    let router = kind
        .router(&kv_events, scenario.profile.block_size, ttl)
        .ok_or("a router that needs KV events got no endpoints")?;
    let gateway = PeerGateway::start(router, &fleet.pods, BASE_MODEL, log_dir).await?;
    let urls = vec![format!("{}/v1/chat/completions", gateway.url())];
    let measured = drive(&scenario, urls, &fleet.pods, time_scale).await;
    gateway.keep_metrics().await;
    drop(gateway);
    drop(fleet);
    Ok(measured)
}

/// Sends the scenario's requests through the gateways at `urls` (several replicas: see
/// the module doc) to `pods`, and measures them and the pods' prefix-cache hits.
pub async fn drive(scenario: &Arc<Scenario>, urls: Vec<String>, pods: &[SocketAddr], time_scale: f64) -> Measured {
    let client = reqwest::Client::builder().pool_max_idle_per_host(512).build().unwrap_or_default();
    let urls = Arc::new(urls);
    let pod_names: Arc<Vec<String>> = Arc::new(pods.iter().map(ToString::to_string).collect());
    let before = engine_runs::counters(&client, pods).await;
    let outcomes = Arc::new(Mutex::new(vec![RequestOutcome::default(); scenario.requests.len()]));
    let trace = Arc::new(Mutex::new(vec![TraceLine::default(); scenario.requests.len()]));
    let mut followers: Vec<Vec<(usize, f64)>> = vec![Vec::new(); scenario.requests.len()];
    for (i, request) in scenario.requests.iter().enumerate() {
        if let Arrival::After { previous, think_s } = request.arrival {
            if let Some(list) = followers.get_mut(previous) {
                list.push((i, think_s));
            }
        }
    }
    let sessions = Arc::new(sessions(scenario, &followers));
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
                urls: Arc::clone(&urls),
                replica: i % urls.len().max(1),
                pods: Arc::clone(&pod_names),
                scenario: Arc::clone(scenario),
                sessions: Arc::clone(&sessions),
                outcomes: Arc::clone(&outcomes),
                trace: Arc::clone(&trace),
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
    // The pods count a request when it finishes; the client saw it finish already.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let engines = engine_runs::counters(&client, pods).await.since(&before);
    let outcomes = outcomes.lock().map(|o| o.clone()).unwrap_or_default();
    let mut result = RunResult::from_outcomes(&outcomes);
    result.prefix_hit_rate = engines.hit_rate().unwrap_or(0.0);
    // A turn never sent (due after the end) has no line: its slot is still the default.
    let trace = trace.lock().map(|t| t.clone()).unwrap_or_default();
    let follow_ups = FollowUps::count(scenario, &outcomes, &trace);
    let trace = trace
        .into_iter()
        .enumerate()
        .filter(|(id, _)| outcomes.get(*id).is_some_and(|o| !o.not_sent))
        .map(|(_, line)| line)
        .collect();
    Measured { result, follow_ups, trace }
}

/// Each request's session, as a client would name it in [`SESSION_HEADER`]: an agent
/// session's calls its own id (`BenchRequest::session`), else the turns of one
/// conversation the id of its first; a request that is no turn of one has none.
fn sessions(scenario: &Scenario, followers: &[Vec<(usize, f64)>]) -> Vec<Option<String>> {
    let mut session: Vec<Option<String>> = vec![None; scenario.requests.len()];
    for (i, request) in scenario.requests.iter().enumerate() {
        let root = match (request.session, request.arrival) {
            (Some(id), _) => Some(format!("session-{id:016x}")),
            (None, Arrival::After { previous, .. }) => session.get(previous).cloned().flatten(),
            (None, Arrival::At(_)) => followers.get(i).is_some_and(|f| !f.is_empty()).then(|| format!("session-{i}")),
        };
        if let Some(slot) = session.get_mut(i) {
            *slot = root;
        }
    }
    session
}

/// Where the follow-up turns whose both turns were served went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FollowUps {
    pub served: usize,
    /// Served by their previous turn's pod.
    pub on_pod: usize,
    /// Decided by a gateway whose prefix index held the previous turn's whole prompt on
    /// its pod: that pod, with at least as many matched blocks as the previous prompt
    /// had, was chosen, or was the prefix owner the request spilled past. `None`
    /// without decision headers (the baselines).
    pub pod_known: Option<usize>,
}

/// Whether `decision` shows `pod` holding `blocks` or more of the prompt: chosen with
/// them, or passed over as the prefix owner (`owner=` when the header names one, else
/// the runner-up, which then holds the longest match).
fn holds_previous_prompt(decision: &str, pod: &str, blocks: f64) -> bool {
    let entry = |role: &str| decision.split("; ").find(|part| part.starts_with(&format!("{role}={pod} ")));
    let holds = |role: &str| entry(role).and_then(|e| explained(e, "prefix_blocks=")).is_some_and(|b| b >= blocks);
    let owner_named = decision.split("; ").any(|part| part.starts_with("owner="));
    let passed_over = if owner_named { "owner" } else { "runner_up" };
    holds("chosen") || (decision.contains("spilled=true") && holds(passed_over))
}

impl FollowUps {
    /// `trace` is indexed by request id, like `outcomes`.
    fn count(scenario: &Scenario, outcomes: &[RequestOutcome], trace: &[TraceLine]) -> Self {
        let served = |id: usize| outcomes.get(id).filter(|o| o.first_token.is_some() && o.pod != UNKNOWN_POD);
        let mut counts = Self::default();
        let mut decided = true;
        for (id, request) in scenario.requests.iter().enumerate() {
            let Arrival::After { previous, .. } = request.arrival else { continue };
            let (Some(before), Some(now)) = (served(previous), served(id)) else { continue };
            counts.served += 1;
            let on_pod = before.pod == now.pod;
            counts.on_pod += usize::from(on_pod);
            let previous_line = trace.get(previous);
            let previous_pod = previous_line.and_then(|l| l.pod.as_deref()).unwrap_or("");
            let previous_blocks =
                previous_line.and_then(|l| l.decision.as_deref()).and_then(|d| explained(d, "; prefix_blocks="));
            match (trace.get(id).and_then(|l| l.decision.as_deref()), previous_blocks) {
                (Some(decision), Some(previous_blocks)) => {
                    let known = holds_previous_prompt(decision, previous_pod, previous_blocks);
                    *counts.pod_known.get_or_insert(0) += usize::from(known);
                }
                _ => decided = false,
            }
        }
        if !decided {
            counts.pod_known = None;
        }
        counts
    }
}

#[derive(Clone)]
struct Ctx {
    id: usize,
    due: Instant,
    start: Instant,
    time_scale: f64,
    client: reqwest::Client,
    /// Every replica's chat URL, and the one this request goes to.
    urls: Arc<Vec<String>>,
    replica: usize,
    /// The pods' addresses, in `RequestOutcome::pod` order.
    pods: Arc<Vec<String>>,
    scenario: Arc<Scenario>,
    /// Each request's [`SESSION_HEADER`], if it is a turn of a session.
    sessions: Arc<Vec<Option<String>>>,
    outcomes: Arc<Mutex<Vec<RequestOutcome>>>,
    trace: Arc<Mutex<Vec<TraceLine>>>,
    followers: Arc<Vec<Vec<(usize, f64)>>>,
    done: tokio::sync::mpsc::UnboundedSender<()>,
}

fn spawn_request(ctx: Ctx) {
    tokio::spawn(async move {
        tokio::time::sleep_until(ctx.due).await;
        let request = &ctx.scenario.requests[ctx.id];
        let virtual_now = |at: Instant| at.duration_since(ctx.start).as_secs_f64() / ctx.time_scale;
        let arrival = Instant::now();
        let url = ctx.urls.get(ctx.replica).map_or("", String::as_str);
        let session = ctx.sessions.get(ctx.id).and_then(Option::as_deref);
        let (first, finished, served_by, decision) = send(&ctx.client, url, request, session).await;
        if let Ok(mut trace) = ctx.trace.lock() {
            if let Some(line) = trace.get_mut(ctx.id) {
                let to_virtual = |ms: f64| ms / ctx.time_scale;
                *line = TraceLine {
                    id: ctx.id,
                    previous: match request.arrival {
                        Arrival::After { previous, .. } => Some(previous),
                        Arrival::At(_) => None,
                    },
                    replica: ctx.replica,
                    arrival_s: virtual_now(arrival),
                    pod: served_by.clone(),
                    ttft_ms: first.map(|at| to_virtual(at.duration_since(arrival).as_secs_f64() * 1000.0)),
                    // The chosen pod's is the first `ttft_ms=` after `chosen=`.
                    predicted_ttft_ms: decision
                        .as_deref()
                        .and_then(|d| explained(d.split_once("chosen=")?.1, "ttft_ms="))
                        .map(to_virtual),
                    snapshot_age_ms: decision.as_deref().and_then(|d| explained(d, "snapshot_age_ms=")),
                    decision,
                };
            }
        }
        if let Ok(mut outcomes) = ctx.outcomes.lock() {
            if let Some(o) = outcomes.get_mut(ctx.id) {
                o.arrival = virtual_now(arrival);
                o.first_token = first.map(virtual_now);
                o.finished = finished.map(virtual_now);
                o.output_tokens = request.output_tokens;
                o.pod = served_by.and_then(|pod| ctx.pods.iter().position(|p| *p == pod)).unwrap_or(UNKNOWN_POD);
            }
        }
        // A conversation goes on whether or not this turn succeeded, until the end.
        let end = finished.or(first).unwrap_or_else(Instant::now);
        let _ = ctx.done.send(());
        for &(next, think_s) in ctx.followers.get(ctx.id).map(Vec::as_slice).unwrap_or_default() {
            let due = end + Duration::from_secs_f64(think_s * ctx.time_scale);
            if virtual_now(due) <= ctx.scenario.duration_s {
                let replica = (ctx.replica + 1) % ctx.urls.len().max(1);
                spawn_request(Ctx { id: next, due, replica, ..ctx.clone() });
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

/// A request no pod answered, or whose pod is not known.
const UNKNOWN_POD: usize = usize::MAX;

/// What one request saw: when the first chunk and the end arrived, the pod that
/// answered (model-sim's `x-infergate-served-by`) and the gateway's decision.
type Sent = (Option<Instant>, Option<Instant>, Option<String>, Option<String>);

/// The streamed chat body of `request`: its prompt as one user message.
pub fn chat_body(request: &BenchRequest) -> serde_json::Value {
    json!({
        "model": request.model,
        "messages": [{"role": "user", "content": String::from_utf8_lossy(&request.prompt.bytes())}],
        "max_tokens": request.output_tokens,
        "stream": true,
    })
}

/// Sends one streamed chat request, naming its session if it has one.
async fn send(client: &reqwest::Client, url: &str, request: &BenchRequest, session: Option<&str>) -> Sent {
    let body = chat_body(request);
    let attempt = async {
        let mut post = client.post(url).json(&body);
        if let Some(session) = session {
            post = post.header(SESSION_HEADER, session);
        }
        let mut response = post.send().await.ok()?;
        if !response.status().is_success() {
            return Some((None, None, None, None));
        }
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(String::from);
        let (served_by, decision) = (header(SERVED_BY), header(DECISION));
        let mut first = None;
        let mut events = SseEvents::default();
        while let Ok(Some(chunk)) = response.chunk().await {
            if first.is_none() && events.data_in(&chunk) {
                first = Some(Instant::now());
            }
        }
        Some((first, first.map(|_| Instant::now()), served_by, decision))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, attempt).await.ok().flatten().unwrap_or((None, None, None, None))
}

/// Where a stream's first token is: the first server-sent event carrying data. A gateway
/// may send comments first (`: keep-alive`; smg does after 15 s of silence, so that an
/// idle-timeout proxy does not cut a stream waiting on a long prefill): those are no
/// token.
#[derive(Debug, Default)]
struct SseEvents {
    /// The start of the line being read, while it may still be `data:`.
    partial: Vec<u8>,
    /// Inside a line that is known to be no `data:` line.
    other_line: bool,
}

impl SseEvents {
    /// Whether `chunk` holds a `data:` line (or the start of one); a line may be cut
    /// across chunks.
    fn data_in(&mut self, chunk: &[u8]) -> bool {
        for &byte in chunk {
            if byte == b'\n' || byte == b'\r' {
                self.partial.clear();
                self.other_line = false;
                continue;
            }
            if self.other_line {
                continue;
            }
            self.partial.push(byte);
            if self.partial.starts_with(b"data:") {
                return true;
            }
            if !b"data:".starts_with(&self.partial) {
                self.partial.clear();
                self.other_line = true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::CalibrationPlan;

    #[test]
    fn a_keep_alive_comment_is_no_first_token() {
        let mut events = SseEvents::default();
        assert!(!events.data_in(b": keep-alive\n\n"));
        assert!(!events.data_in(b": keep-alive\n\nda"), "a data line cut after two bytes");
        assert!(events.data_in(b"ta: {\"choices\":[]}\n\n"), "the rest of it");
        assert!(SseEvents::default().data_in(b"data: {}\n\n"));
        assert!(!SseEvents::default().data_in(b"event: ping\n: data: not at a line start\n"));
        let mut cut = SseEvents::default();
        assert!(!cut.data_in(b": keep "), "a comment cut in two");
        assert!(!cut.data_in(b"data: is still the comment\n"));
        assert!(cut.data_in(b"data: {}\n"));
    }

    /// One conversation of four turns, served by these pods, with these decisions.
    fn conversation(pods: [usize; 4], decisions: [Option<&String>; 4]) -> FollowUps {
        let turn = |arrival| BenchRequest {
            arrival,
            model: "m".into(),
            adapter: None,
            prompt: Vec::new().into(),
            output_tokens: 1,
            session: None,
        };
        let scenario = Scenario {
            pods: 2,
            profile: infergate_model_sim::engine::EngineProfile::TINY,
            adapters: Vec::new(),
            requests: vec![
                turn(Arrival::At(0.0)),
                turn(Arrival::After { previous: 0, think_s: 1.0 }),
                turn(Arrival::After { previous: 1, think_s: 1.0 }),
                turn(Arrival::After { previous: 2, think_s: 1.0 }),
            ],
            duration_s: 10.0,
            calibration: CalibrationPlan::NONE,
        };
        let names = ["127.0.0.1:1", "127.0.0.1:2"];
        let outcomes: Vec<RequestOutcome> = pods
            .iter()
            .map(|&pod| RequestOutcome { first_token: Some(1.0), pod, ..RequestOutcome::default() })
            .collect();
        let trace: Vec<TraceLine> = pods
            .iter()
            .zip(decisions)
            .map(|(&pod, decision)| TraceLine {
                pod: names.get(pod).map(|n| n.to_string()),
                decision: decision.cloned(),
                ..TraceLine::default()
            })
            .collect();
        FollowUps::count(&scenario, &outcomes, &trace)
    }

    /// A decision header: the prompt's blocks, then `role=pod prefix_blocks=n` entries.
    fn header(spilled: bool, prompt_blocks: usize, entries: &[(&str, usize, usize)]) -> String {
        let mut out = format!("pool=a; spilled={spilled}; prefix_blocks={prompt_blocks}; snapshot_age_ms=5");
        for (role, port, blocks) in entries {
            out.push_str(&format!(
                "; {role}=127.0.0.1:{port} score=-1.0 ttft_ms=1.0 prefix_blocks={blocks} adapter=NotNeeded"
            ));
        }
        out
    }

    #[test]
    fn a_follow_up_counts_as_known_when_its_pod_held_the_previous_prompt() {
        let first = header(false, 10, &[("chosen", 1, 0)]);
        // On its pod with the whole previous prompt (10 blocks) matched: known.
        let kept = header(false, 14, &[("chosen", 1, 10), ("runner_up", 2, 0)]);
        // Spilled past the runner-up, the pod holding the previous prompt: known.
        let spilled = header(true, 18, &[("chosen", 2, 0), ("runner_up", 1, 14)]);
        // Back on pod 1, but matched only the first turn there: the previous turn's
        // record (pod 2) was not known.
        let blind = header(false, 22, &[("chosen", 1, 14), ("runner_up", 2, 0)]);
        let counts = conversation([0, 0, 1, 0], [Some(&first), Some(&kept), Some(&spilled), Some(&blind)]);
        assert_eq!(counts, FollowUps { served: 3, on_pod: 1, pod_known: Some(2) });
    }

    #[test]
    fn with_an_owner_named_the_runner_up_does_not_count() {
        let first = header(false, 10, &[("chosen", 1, 0)]);
        // Pod 1 served turn 0 and is the runner-up, but the header names pod 2 as the
        // owner: pod 1 did not hold the longest match.
        let owner_elsewhere = header(true, 14, &[("chosen", 2, 0), ("runner_up", 1, 10), ("owner", 2, 12)]);
        let counts = conversation([0, 1, 1, 1], [Some(&first), Some(&owner_elsewhere), None, None]);
        assert_eq!(counts.pod_known, None, "turns 2 and 3 have no decision");
        let owner_is_it = header(true, 14, &[("chosen", 2, 0), ("runner_up", 2, 0), ("owner", 1, 10)]);
        let kept = header(false, 18, &[("chosen", 2, 14)]);
        let kept_again = header(false, 22, &[("chosen", 2, 18)]);
        let both = [Some(&first), Some(&owner_elsewhere), Some(&kept), Some(&kept_again)];
        assert_eq!(conversation([0, 1, 1, 1], both).pod_known, Some(2), "turn 1 not known, 2 and 3 known");
        let both = [Some(&first), Some(&owner_is_it), Some(&kept), Some(&kept_again)];
        assert_eq!(conversation([0, 1, 1, 1], both).pod_known, Some(3));
    }

    #[test]
    fn a_conversation_is_one_session_and_an_agent_session_its_own() {
        let turn = |arrival, session| BenchRequest {
            arrival,
            model: "m".into(),
            adapter: None,
            prompt: Vec::new().into(),
            output_tokens: 1,
            session,
        };
        let requests = vec![
            // A conversation of two turns, then a lone request.
            turn(Arrival::At(0.0), None),
            turn(Arrival::After { previous: 0, think_s: 1.0 }, None),
            turn(Arrival::At(0.0), None),
            // One user's two agent sessions, back to back in one chain.
            turn(Arrival::At(0.0), Some(7)),
            turn(Arrival::After { previous: 3, think_s: 1.0 }, Some(7)),
            turn(Arrival::After { previous: 4, think_s: 1.0 }, Some(8)),
        ];
        let scenario = Scenario {
            pods: 1,
            profile: infergate_model_sim::engine::EngineProfile::TINY,
            adapters: Vec::new(),
            requests,
            duration_s: 10.0,
            calibration: CalibrationPlan::NONE,
        };
        let mut followers = vec![Vec::new(); 6];
        followers[0].push((1, 1.0));
        followers[3].push((4, 1.0));
        followers[4].push((5, 1.0));
        let ids = sessions(&scenario, &followers);
        assert_eq!(ids[0], ids[1]);
        assert!(ids[0].is_some() && ids[2].is_none(), "{ids:?}");
        assert_eq!(ids[3], ids[4]);
        assert_ne!(ids[4], ids[5], "the user's next session has an id of its own");
    }

    #[test]
    fn without_decision_headers_nothing_is_known() {
        assert_eq!(conversation([0, 1, 1, 0], [None; 4]), FollowUps { served: 3, on_pod: 1, pod_known: None });
    }
}
