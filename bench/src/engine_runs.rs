//! Part 3: inference-perf's `shared_prefix` workload through real Envoy, against real
//! vLLM pods (CPU) and against model-sim pods calibrated to them, with infergate and
//! with Envoy's own `round_robin` and `least_request`. Every policy gets fresh pods, so
//! no run inherits another's prefix cache; the engines' own counters give the prefix
//! hit rate and how the requests were spread.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use infergate_core::config::Engine;
use infergate_envoy_config::UpstreamPolicy;
use infergate_harness::engines::VllmPod;
use infergate_harness::fleet::Fleet;
use infergate_harness::peer_router::PeerGateway;
use infergate_harness::{ModelSpec, Stack, StackSpec};
use infergate_model_sim::engine::EngineProfile;
use infergate_signals::exposition;

use crate::inference_perf::{self, SharedPrefix, Summary};
use crate::peers::{Gateway, KV_AWARE_SESSION_TTL_S};
use crate::prefix_groups::{self, GroupSpread};
use crate::ttft_tail::{self, TtftTail};

/// The policies of part 3, by report name.
pub const POLICIES: [(&str, UpstreamPolicy); 3] = [
    ("infergate", UpstreamPolicy::Infergate),
    ("round_robin", UpstreamPolicy::RoundRobin),
    ("least_request", UpstreamPolicy::LeastRequest),
];

/// The model both engines serve (engines/vllm/serve.sh's name).
pub const MODEL: &str = "smollm2";

/// model-sim shaped like one `engines/vllm/serve.sh` pod on this machine: 4 sequences,
/// 50 KV blocks of 128 tokens, and the speeds one idle pod showed (BENCHMARKS.md part
/// 3): 1,064 uncached prompt tokens in 1.9 s (about 570 tokens/s), 64 new tokens after
/// a cached 1,000 in 0.27 s, 32 tokens decoded at 37 ms each. The engines' own
/// `request_prefill_time_seconds` reads lower under load (350-430 tokens/s), probably
/// because it counts a request's whole prefill phase while batched with others (not
/// measured).
pub const SMOLLM2_CPU: EngineProfile = EngineProfile {
    max_num_seqs: 4,
    max_num_batched_tokens: 2048,
    prefill_tokens_per_s: 570.0,
    itl_base_ms: 35.0,
    itl_per_seq_ms: 6.0,
    num_gpu_blocks: 50,
    block_size: 128,
    max_loras: 1,
    lora_load_ms: 50.0,
    attention_ns_per_pair: 0.0,
    kv_read_ns_per_token: 0.0,
};

/// Which pods a run routes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pods {
    /// Real vLLM on CPU (`make vllm`).
    Vllm,
    /// model-sim with the [`SMOLLM2_CPU`] profile.
    ModelSim,
}

impl Pods {
    pub fn name(self) -> &'static str {
        match self {
            Pods::Vllm => "vllm",
            Pods::ModelSim => "model-sim",
        }
    }
}

/// The engines' own counters over a run, summed over the pods.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct EngineCounters {
    /// Prompt tokens looked up in the prefix cache, and found there.
    pub prefix_queried_tokens: f64,
    pub prefix_hit_tokens: f64,
    /// Requests each pod served (its TTFT histogram's count).
    pub requests_per_pod: Vec<f64>,
    /// Prompt tokens, and the seconds the engines spent prefilling, for the speed
    /// model-sim's profile must match.
    pub prompt_tokens: f64,
    pub prefill_seconds: f64,
    /// Sum and count of the inter-token latencies.
    pub itl_seconds: f64,
    pub itl_count: f64,
}

impl EngineCounters {
    pub fn hit_rate(&self) -> Option<f64> {
        (self.prefix_queried_tokens > 0.0).then(|| self.prefix_hit_tokens / self.prefix_queried_tokens)
    }

    /// Uncached prompt tokens prefilled per second of prefill.
    pub fn prefill_tokens_per_s(&self) -> Option<f64> {
        (self.prefill_seconds > 0.0).then(|| (self.prompt_tokens - self.prefix_hit_tokens) / self.prefill_seconds)
    }

    pub fn mean_itl_ms(&self) -> Option<f64> {
        (self.itl_count > 0.0).then(|| self.itl_seconds / self.itl_count * 1000.0)
    }

    pub fn since(&self, before: &Self) -> Self {
        Self {
            prefix_queried_tokens: self.prefix_queried_tokens - before.prefix_queried_tokens,
            prefix_hit_tokens: self.prefix_hit_tokens - before.prefix_hit_tokens,
            requests_per_pod: self.requests_per_pod.iter().zip(&before.requests_per_pod).map(|(a, b)| a - b).collect(),
            prompt_tokens: self.prompt_tokens - before.prompt_tokens,
            prefill_seconds: self.prefill_seconds - before.prefill_seconds,
            itl_seconds: self.itl_seconds - before.itl_seconds,
            itl_count: self.itl_count - before.itl_count,
        }
    }
}

/// One policy on one kind of pods.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EngineRun {
    pub pods: &'static str,
    pub policy: &'static str,
    pub summary: Summary,
    pub counters: EngineCounters,
    /// Where the prefix groups went (infergate only: its decisions name them).
    pub groups: Option<GroupSpread>,
    /// How much of the TTFT tail is each group's cold first request.
    pub tail: Option<TtftTail>,
}

/// Runs `workload` with `policy` on `count` fresh pods; logs and reports go to `out`.
pub async fn run(
    pods: Pods,
    count: usize,
    (name, policy): (&'static str, UpstreamPolicy),
    workload: &SharedPrefix,
    out: &Path,
) -> Result<EngineRun, String> {
    run_through(pods, count, name, &Gateway::Envoy(policy), PodKvEvents::Unpublished, workload, out).await
}

/// Whether the pods publish their KV events (vLLM's `--kv-events-config`, with
/// `--enable-scale-out` for the render endpoint `kv_aware` asks for token ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodKvEvents {
    Unpublished,
    Published,
}

/// The pods of one run, and what routes to them.
enum Routed {
    Envoy(Box<Stack>),
    Peer(PeerGateway, Fleet),
}

/// One run's fresh pods and the gateway in front of them, dropped together.
struct Started {
    routed: Routed,
    /// The real vLLM pods (none on model-sim pods, which the gateway's fleet holds).
    _vllm: Vec<VllmPod>,
}

impl Started {
    fn url(&self) -> String {
        match &self.routed {
            Routed::Envoy(stack) => stack.gateway_url.clone(),
            Routed::Peer(gateway, _) => gateway.url(),
        }
    }

    fn pods(&self) -> Vec<SocketAddr> {
        match &self.routed {
            Routed::Envoy(stack) => stack.fleet.pods.clone(),
            Routed::Peer(_, fleet) => fleet.pods.clone(),
        }
    }

    /// Keeps a peer router's own metrics beside its log; Envoy's are in the access log.
    async fn keep_router_metrics(&self) {
        if let Routed::Peer(gateway, _) = &self.routed {
            gateway.keep_metrics().await;
        }
    }
}

/// How one run's pods and gateway start.
struct Setup<'a> {
    pods: Pods,
    count: usize,
    name: &'static str,
    gateway: &'a Gateway,
    events: PodKvEvents,
    /// `engines/vllm/serve.sh`'s variables for the vLLM pods.
    env: &'a [(&'a str, &'a str)],
    /// `kv_aware`'s session affinity, where the workload has sessions.
    session_ttl_s: Option<u64>,
    /// Envoy's access log, with infergate's decision on each request's line.
    access_log: bool,
    request_timeout_ms: u64,
}

/// Starts fresh pods (real vLLM pods are checked to decode at this machine's speed) and
/// the gateway in front of them.
async fn start(setup: &Setup<'_>, out: &Path) -> Result<Started, String> {
    let client = reqwest::Client::new();
    let mut vllm = Vec::new();
    let mut kv_events = Vec::new();
    if setup.pods == Pods::Vllm {
        eprintln!("{}/{}: starting {} fresh vLLM pods (30-70 s)", setup.pods.name(), setup.name, setup.count);
        for _ in 0..setup.count {
            match setup.events {
                PodKvEvents::Unpublished => vllm.push(VllmPod::vllm(false, out)),
                PodKvEvents::Published => {
                    let (pod, endpoint) = VllmPod::vllm_publishing_kv_events(setup.env, out);
                    kv_events.push((pod.address, endpoint));
                    vllm.push(pod);
                }
            }
        }
        for pod in &mut vllm {
            pod.wait_ready(&client).await;
            decode_check(&client, pod).await?;
        }
    }
    let external = (!vllm.is_empty()).then(|| (Engine::Vllm, vllm.iter().map(|p| p.address).collect::<Vec<_>>()));
    let routed = match setup.gateway {
        Gateway::Envoy(policy) => Routed::Envoy(Box::new(
            Stack::start(StackSpec {
                pools: vec![("fleet", setup.count)],
                models: vec![ModelSpec::base(MODEL, "fleet")],
                max_body_bytes: 8 * 1024 * 1024,
                profile: SMOLLM2_CPU,
                upstream_policy: *policy,
                access_log: setup.access_log,
                scrape_interval_ms: 100,
                request_timeout_ms: setup.request_timeout_ms,
                external_pods: external,
                ..StackSpec::default()
            })
            .await,
        )),
        Gateway::Peer(kind) => {
            let fleet = match external {
                Some((_, addresses)) => Fleet::external(addresses),
                None => Fleet::start_serving(setup.count, SMOLLM2_CPU, 1.0, &[MODEL.to_string()], &[]).await,
            };
            let router = kind
                .router(&kv_events, SMOLLM2_CPU.block_size, setup.session_ttl_s)
                .ok_or_else(|| format!("{} needs the pods' KV events, which these pods do not publish", setup.name))?;
            Routed::Peer(PeerGateway::start(router, &fleet.pods, MODEL, out).await?, fleet)
        }
    };
    Ok(Started { routed, _vllm: vllm })
}

/// As [`run`], through any gateway of the peers bench: infergate or one of Envoy's
/// policies in real Envoy, or a peer's own router; `events` says how the vLLM pods
/// are started (every gateway of one comparison gets the same).
pub async fn run_through(
    pods: Pods,
    count: usize,
    name: &'static str,
    gateway: &Gateway,
    events: PodKvEvents,
    workload: &SharedPrefix,
    out: &Path,
) -> Result<EngineRun, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let setup = Setup {
        pods,
        count,
        name,
        gateway,
        events,
        env: &[],
        session_ttl_s: None,
        // Each request's line carries infergate's decision (`x-infergate-decision`):
        // kept beside the report, it shows where each prefix group went.
        access_log: true,
        request_timeout_ms: 180_000,
    };
    let started = start(&setup, out).await?;
    let client = reqwest::Client::new();
    let addresses = started.pods();
    let before = counters(&client, &addresses).await;
    let label = format!("{}/{name}", pods.name());
    let summary = inference_perf::run(workload, &started.url(), out, &label).await?;
    // The engines count a request when it finishes; the client saw it finish already.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = counters(&client, &addresses).await;
    started.keep_router_metrics().await;
    let groups = match &started.routed {
        Routed::Envoy(stack) => keep_access_log(stack, summary.sent, out, &label).await,
        Routed::Peer(..) => None,
    };
    let per_request = out.join("report/per_request_lifecycle_metrics.json");
    let tail = std::fs::read_to_string(&per_request)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .and_then(|report| ttft_tail::from_per_request(&report));
    if tail.is_none() {
        eprintln!("{label}: no per-request TTFTs in {}; the tail table leaves this run out", per_request.display());
    }
    drop(started);
    Ok(EngineRun { pods: pods.name(), policy: name, summary, counters: after.since(&before), groups, tail })
}

/// What the agentic replay on real vLLM sets of `engines/vllm/serve.sh`: a 4,096-token
/// window (the default KV cache, 6,400 tokens, must hold one whole request).
pub const AGENTIC_VLLM_ENV: [(&str, &str); 1] = [("VLLM_MAX_MODEL_LEN", "4096")];

/// The requests of `scenario` (already scaled for SmolLM2: `workloads::scaled`) sent
/// by part 2's load generator, closed loop, through `gateway` to `count` fresh real
/// vLLM pods that publish their KV events.
pub async fn run_scenario_through(
    count: usize,
    name: &'static str,
    gateway: &Gateway,
    scenario: &std::sync::Arc<crate::workloads::Scenario>,
    out: &Path,
) -> Result<crate::e2e::Measured, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let setup = Setup {
        pods: Pods::Vllm,
        count,
        name,
        gateway,
        events: PodKvEvents::Published,
        env: &AGENTIC_VLLM_ENV,
        session_ttl_s: Some(KV_AWARE_SESSION_TTL_S),
        access_log: false,
        request_timeout_ms: 300_000,
    };
    let started = start(&setup, out).await?;
    let url = format!("{}/v1/chat/completions", started.url());
    let measured = crate::e2e::drive(scenario, vec![url], &started.pods(), 1.0).await;
    started.keep_router_metrics().await;
    drop(started);
    Ok(measured)
}

/// Keeps Envoy's access log beside the report, once it holds every request's line
/// (Envoy flushes it on a timer), and reads from its decisions where each prefix group
/// went.
async fn keep_access_log(stack: &Stack, sent: u64, out: &Path, label: &str) -> Option<GroupSpread> {
    let lines = || {
        std::fs::read_to_string(stack.path("envoy.out"))
            .map_or(0, |t| t.lines().filter(|l| l.starts_with("[access]")).count())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while (lines() as u64) < sent && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let access_log = out.join("envoy-access.log");
    if let Err(e) = std::fs::copy(stack.path("envoy.out"), &access_log) {
        eprintln!("{label}: cannot keep Envoy's access log as {}: {e}", access_log.display());
    }
    std::fs::read_to_string(&access_log).ok().and_then(|text| prefix_groups::from_access_log(&text))
}

/// Tokens the decode check asks for.
const CHECK_TOKENS: u64 = 16;

/// The slowest decode the check accepts, per token, the first request's warm-up
/// included: an idle pod here takes 40-90 ms ([`SMOLLM2_CPU`] decodes at 37).
const CHECK_MAX_MS_PER_TOKEN: f64 = 1_000.0;

/// Times one short answer straight from a fresh pod, before any policy's load, and
/// fails the run when the engine decodes far slower than this machine's vLLM does.
/// Once, every pod on this machine answered its first prefill and then decoded at 0.1
/// to 0.3 tokens/s (TPOT 2.4 s); all three policies then timed out on all 600 requests,
/// after 21 minutes, and the report measured the engines' hang, not routing. The
/// check's prompt shares no prefix with the workload's groups, and the engines'
/// counters are read after it.
async fn decode_check(client: &reqwest::Client, pod: &VllmPod) -> Result<(), String> {
    let body = serde_json::json!({
        "model": MODEL,
        "prompt": "Decode check: count slowly from one to twenty.",
        "max_tokens": CHECK_TOKENS,
        "ignore_eos": true,
        "temperature": 0,
    });
    let started = std::time::Instant::now();
    let url = format!("http://{}/v1/completions", pod.address);
    let answer = client
        .post(&url)
        .json(&body)
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| format!("decode check on {}: {e}; the pod's log: {}", pod.address, pod.log.display()))?;
    let answer: serde_json::Value =
        answer.json().await.map_err(|e| format!("decode check on {}: unreadable answer: {e}", pod.address))?;
    let tokens = answer.pointer("/usage/completion_tokens").and_then(serde_json::Value::as_u64).unwrap_or(0);
    let ms_per_token = started.elapsed().as_secs_f64() * 1000.0 / tokens.max(1) as f64;
    eprintln!("decode check on {}: {tokens} tokens at {ms_per_token:.0} ms each", pod.address);
    if tokens < CHECK_TOKENS || ms_per_token > CHECK_MAX_MS_PER_TOKEN {
        return Err(format!(
            "vLLM on {} answered {tokens} of {CHECK_TOKENS} tokens at {ms_per_token:.0} ms each (at most \
             {CHECK_MAX_MS_PER_TOKEN:.0} expected): the engine, not routing, would be measured; its log: {}",
            pod.address,
            pod.log.display()
        ));
    }
    Ok(())
}

/// Reads every pod's prefix-cache and request counters from its `/metrics`.
pub async fn counters(client: &reqwest::Client, pods: &[SocketAddr]) -> EngineCounters {
    let mut total = EngineCounters::default();
    for pod in pods {
        let text = match client.get(format!("http://{pod}/metrics")).send().await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let samples = exposition::parse(&text).unwrap_or_default();
        let sum = |name: &str| samples.iter().filter(|s| s.name == name).map(|s| s.value).sum::<f64>();
        total.prefix_queried_tokens += sum("vllm:prefix_cache_queries_total");
        total.prefix_hit_tokens += sum("vllm:prefix_cache_hits_total");
        total.requests_per_pod.push(sum("vllm:time_to_first_token_seconds_count"));
        total.prompt_tokens += sum("vllm:prompt_tokens_total");
        total.prefill_seconds += sum("vllm:request_prefill_time_seconds_sum");
        total.itl_seconds += sum("vllm:inter_token_latency_seconds_sum");
        total.itl_count += sum("vllm:inter_token_latency_seconds_count");
    }
    total
}

/// The Markdown tables of part 3.
pub fn markdown(runs: &[EngineRun], workload: &SharedPrefix, count: usize) -> String {
    let mut text = format!(
        "Part 3: inference-perf `shared_prefix` ({} groups × {} prompts, {}-token system prompts, {}-token questions, {} output tokens), {} req/s for {} s, streamed, through Envoy to {count} pods per policy, fresh pods for each policy.\n\n",
        workload.groups,
        workload.prompts_per_group,
        workload.system_prompt_tokens,
        workload.question_tokens,
        workload.output_tokens,
        workload.rate,
        workload.duration_s,
    );
    text.push_str("| pods | policy | sent | ok | failed | TTFT p50 ms | p90 ms | p99 ms | TPOT p50 ms | req/s | output tok/s | engines' prefix hit rate | requests per pod | engines' prefill tok/s | engines' mean ITL ms | away from their group's pod |\n");
    text.push_str("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|\n");
    for run in runs {
        let s = &run.summary;
        let hit = run.counters.hit_rate().map_or_else(|| "–".to_string(), |r| format!("{:.1}%", r * 100.0));
        let spread: Vec<String> = run.counters.requests_per_pod.iter().map(|n| format!("{n:.0}")).collect();
        let or_dash = |v: Option<f64>, digits: usize| v.map_or_else(|| "–".to_string(), |v| format!("{v:.digits$}"));
        text.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.2} | {:.1} | {hit} | {} | {} | {} | {} |\n",
            run.pods,
            run.policy,
            s.sent,
            s.succeeded,
            s.failed,
            s.ttft_ms.p50,
            s.ttft_ms.p90,
            s.ttft_ms.p99,
            s.tpot_ms.p50,
            s.requests_per_s,
            s.output_tokens_per_s,
            spread.join(" / "),
            or_dash(run.counters.prefill_tokens_per_s(), 0),
            or_dash(run.counters.mean_itl_ms(), 1),
            run.groups.map_or_else(
                || "–".to_string(),
                |g| format!("{} of {} ({} groups)", g.away_from_home, g.requests, g.groups)
            ),
        ));
    }
    let failures: Vec<String> = runs
        .iter()
        .flat_map(|r| {
            r.summary.failures.iter().map(move |(label, n)| format!("{}/{}: {n} × {label}", r.pods, r.policy))
        })
        .collect();
    if !failures.is_empty() {
        text.push_str(&format!("\nFailures: {}.\n", failures.join("; ")));
    }
    text.push_str(&tails(runs));
    text.push_str(&targets(runs));
    text
}

/// Where each run's TTFT tail comes from: each prefix group's first request is cold
/// under every policy.
fn tails(runs: &[EngineRun]) -> String {
    let rows: Vec<String> = runs
        .iter()
        .filter_map(|run| {
            let tail = run.tail?;
            Some(format!(
                "| {} | {} | {} | {} of {} | {:.0} | {:.0} |\n",
                run.pods,
                run.policy,
                tail.group_firsts,
                tail.firsts_in_slowest_tenth,
                tail.slowest_tenth,
                run.summary.ttft_ms.p90,
                tail.p90_without_firsts_ms,
            ))
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut text = String::from(
        "\nThe TTFT tail (inference-perf's per-request report): each prefix group's first request is cold whatever the policy.\n\n| pods | policy | groups' first requests | of them in the slowest tenth | TTFT p90 ms | p90 without them ms |\n|---|---|--:|--:|--:|--:|\n",
    );
    text.extend(rows);
    text
}

/// The targets on each kind of pods: TTFT p90 ≤ 0.5× round robin's and below
/// least_request's, and a prefix hit rate ≥ 2× round robin's.
fn targets(runs: &[EngineRun]) -> String {
    let mut text = String::from("\n| pods | target | measured | met |\n|---|---|--:|---|\n");
    let mut kinds: Vec<&str> = runs.iter().map(|r| r.pods).collect();
    kinds.dedup();
    for pods in kinds {
        let get = |policy: &str| runs.iter().find(|r| r.pods == pods && r.policy == policy);
        let (Some(ours), Some(rr)) = (get("infergate"), get("round_robin")) else { continue };
        let ratio = ours.summary.ttft_ms.p90 / rr.summary.ttft_ms.p90.max(f64::MIN_POSITIVE);
        text.push_str(&format!("| {pods} | TTFT p90 ≤ 0.5 × round_robin | {ratio:.2}× | {} |\n", yes(ratio <= 0.5)));
        if let Some(lr) = get("least_request") {
            let ratio = ours.summary.ttft_ms.p90 / lr.summary.ttft_ms.p90.max(f64::MIN_POSITIVE);
            text.push_str(&format!("| {pods} | TTFT p90 < least_request | {ratio:.2}× | {} |\n", yes(ratio < 1.0)));
        }
        if let (Some(a), Some(b)) = (ours.counters.hit_rate(), rr.counters.hit_rate()) {
            let ratio = a / b.max(f64::MIN_POSITIVE);
            text.push_str(&format!(
                "| {pods} | prefix hit rate ≥ 2 × round_robin | {ratio:.2}× | {} |\n",
                yes(ratio >= 2.0)
            ));
        }
    }
    text
}

fn yes(met: bool) -> &'static str {
    if met { "yes" } else { "**no**" }
}
