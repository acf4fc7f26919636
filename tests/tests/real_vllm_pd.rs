//! Prefill/decode disaggregation through real Envoy with two real vLLM pods (CPU,
//! SmolLM2-135M, `make vllm`) handing the KV cache over with vLLM's NixlConnector
//! (`engines/vllm/serve-pd.sh`, `engines/vllm/PD.md`), in `mode: gateway`: the filter
//! itself sends the prefill leg to the prefill pod and the returned
//! `kv_transfer_params` on to the decode pod. No sidecar.
//!
//! The pods' own counters say where each prompt was computed: the decode pod takes it
//! from the connector (`source="external_kv_transfer"`) and computes (almost) none of
//! it (`local_compute`); the prefill pod computes it. Then the prefill pod is killed:
//! the next request is served whole on the decode pod, after the filter's fallback.
//!
//! Behind the feature `vllm-pd` (`make test-vllm-pd`; `make test` turns it on), so a
//! plain `cargo test --workspace` leaves it out: the two NIXL pods busy-poll about a
//! core each, and a handover on a loaded 2-core machine can take seconds. Cargo runs
//! one test binary at a time, so no other test shares the machine with them.

use std::time::{Duration, Instant};

use infergate_core::config::{DisaggMode, Disaggregation, Engine, SplitPolicy};
use infergate_core::wire::stat;
use infergate_e2e::engine_stack::{sse_events, words};
use infergate_e2e::engines::{VllmPod, vllm_installed};
use infergate_e2e::{ModelSpec, Reply, Stack, StackSpec};
use serde_json::{Value, json};

const MODEL: &str = "smollm2";
const POOL: &str = "smollm2";
/// Words of the prompts: SmolLM2 makes about one token of each, about 500 with the
/// chat template.
const PROMPT_WORDS: usize = 480;
/// Tokens the decode pod may compute itself of a handed-over prompt: PD.md saw 0, and
/// vLLM recomputes at most the prompt's last one.
const LOCAL_SLACK: f64 = 4.0;
const PROMPT_SERIES: &str = "vllm:prompt_tokens_by_source_total";

/// The two pods, killed (process groups) when dropped, their log tails printed first
/// if the test failed.
struct Pair {
    prefill: VllmPod,
    decode: VllmPod,
}

impl Drop for Pair {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (role, pod) in [("prefill", &self.prefill), ("decode", &self.decode)] {
                eprintln!("----- {role} pod {} ({}) -----\n{}", pod.address, pod.log.display(), pod.log_tail());
            }
        }
    }
}

/// A pod's prompt tokens by where they came from (`local_compute`,
/// `external_kv_transfer`, …), summed over its series.
async fn prompt_tokens(pod: &VllmPod, client: &reqwest::Client, source: &str) -> f64 {
    let label = format!("source=\"{source}\"");
    pod.metrics_text(client)
        .await
        .lines()
        .filter(|line| line.starts_with(PROMPT_SERIES) && line.contains(&label))
        .filter_map(|line| line.rsplit_once(' ').and_then(|(_, value)| value.parse::<f64>().ok()))
        .fold(0.0, |sum, value| sum + value)
}

/// Prompt tokens of both pods, by source, at one moment.
#[derive(Debug, Clone, Copy)]
struct Counts {
    prefill_local: f64,
    decode_local: f64,
    decode_external: f64,
}

impl Counts {
    async fn read(pair: &Pair, client: &reqwest::Client) -> Self {
        Self {
            prefill_local: prompt_tokens(&pair.prefill, client, "local_compute").await,
            decode_local: prompt_tokens(&pair.decode, client, "local_compute").await,
            decode_external: prompt_tokens(&pair.decode, client, "external_kv_transfer").await,
        }
    }

    /// The counts once the decode pod has counted `prompt` more tokens than `before`
    /// (vLLM may count a request just after its answer), or after 10 s.
    async fn after(pair: &Pair, client: &reqwest::Client, before: Self, prompt: f64) -> Self {
        let started = Instant::now();
        loop {
            let now = Self::read(pair, client).await;
            let decoded = now.decode_local + now.decode_external - before.decode_local - before.decode_external;
            if decoded >= prompt || started.elapsed() > Duration::from_secs(10) {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A chat request of about 500 tokens, greedy, 16 tokens out, streamed with usage or not.
fn chat(seed: &str, stream: bool) -> String {
    let prompt = format!("{}\nSummarise the text above in one sentence.", words(seed, PROMPT_WORDS));
    let mut body = json!({
        "model": MODEL, "messages": [{"role": "user", "content": prompt}],
        "temperature": 0, "max_tokens": 16,
    });
    if stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    body.to_string()
}

/// The answer's text and its prompt tokens, from the JSON body or the stream's events.
fn answer(reply: &Reply, stream: bool) -> (String, f64) {
    assert_eq!(reply.status, 200, "{:?}\n{}", reply.headers, reply.body);
    let (text, usage) = if stream {
        assert!(reply.body.trim_end().ends_with("data: [DONE]"), "{}", reply.body);
        let events = sse_events(&reply.body);
        let text: String =
            events.iter().filter_map(|e| e["choices"][0]["delta"]["content"].as_str()).collect::<Vec<_>>().concat();
        (text, events.last().map(|e| e["usage"].clone()).unwrap_or(Value::Null))
    } else {
        let body = reply.json();
        (body["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_string(), body["usage"].clone())
    };
    assert!(!text.trim().is_empty(), "no text: {}", reply.body);
    let prompt = usage["prompt_tokens"].as_f64().unwrap_or_else(|| panic!("no usage: {}", reply.body));
    (text, prompt)
}

/// The sum of the filter's `infergate.pd.fallback.<reason>` counters.
async fn fallbacks(stack: &Stack) -> u64 {
    let url =
        format!("{}/stats?filter=^wasmcustom\\.{}", stack.admin_url, stat::PD_FALLBACK_PREFIX.replace('.', "\\."));
    let text = stack.client().get(url).send().await.expect("Envoy's admin answers").text().await.unwrap_or_default();
    text.lines()
        .filter_map(|line| line.split_once(": "))
        .filter_map(|(_, value)| value.trim().parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_hands_prompts_from_a_real_vllm_prefill_pod_to_its_decode_pod() {
    if let Err(missing) = vllm_installed() {
        panic!("{missing}");
    }
    let started = Instant::now();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    // A handover on this loaded machine has taken 36 s: the prefill pod keeps the
    // blocks longer than vLLM's 30 s.
    let lease = [("VLLM_PD_LEASE_S", "180")];
    let mut pair = Pair {
        prefill: VllmPod::vllm_pd("prefill", &lease, dir.path()),
        decode: VllmPod::vllm_pd("decode", &[], dir.path()),
    };
    pair.prefill.wait_ready(&client).await;
    pair.decode.wait_ready(&client).await;
    eprintln!("vLLM prefill and decode pods ready after {:.1} s", started.elapsed().as_secs_f64());
    let (prefill, decode) = (pair.prefill.address, pair.decode.address);

    let disaggregation = Disaggregation {
        mode: DisaggMode::Gateway,
        split: SplitPolicy::Always,
        prefill_timeout_ms: 60_000,
        ..Disaggregation::default()
    };
    let spec = StackSpec {
        pools: vec![(POOL, 2)],
        models: vec![ModelSpec::base(MODEL, POOL)],
        external_pods: Some((Engine::Vllm, vec![prefill, decode])),
        // The first pod only prefills, the second only decodes.
        disaggregation: Some((disaggregation, 1)),
        scrape_interval_ms: 200,
        request_timeout_ms: 180_000,
        ..StackSpec::default()
    };
    let mut stack = Stack::start(spec).await;

    // Handed over: a whole answer and a streamed one, each prompt new to both pods.
    for (seed, stream) in [("handover", false), ("streamed", true)] {
        let before = Counts::read(&pair, &client).await;
        let sent = Instant::now();
        let reply = stack.post("/v1/chat/completions", chat(seed, stream), &[]).await;
        let (text, prompt) = answer(&reply, stream);
        let decision = reply.header("x-infergate-decision").unwrap_or_default().to_string();
        let after = Counts::after(&pair, &client, before, prompt).await;
        eprintln!(
            "stream {stream}: {prompt} prompt tokens, {:.1} s, {text:?}; {before:?} -> {after:?}; {decision}",
            sent.elapsed().as_secs_f64()
        );
        assert!(decision.contains("pd=split"), "stream {stream}: {decision}");
        assert!(decision.contains(&format!("prefill={prefill}")), "stream {stream}: {decision}");
        assert!(decision.contains(&format!("endpoints={decode}")), "stream {stream}: {decision}");
        assert!(decision.contains("pd_prefill=ok") && !decision.contains("pd_fallback"), "stream {stream}: {decision}");
        assert!(prompt >= 400.0, "a prompt of about 500 tokens: {prompt}");
        let external = after.decode_external - before.decode_external;
        let local = after.decode_local - before.decode_local;
        assert!(
            external >= prompt - LOCAL_SLACK && external <= prompt,
            "stream {stream}: the decode pod took {external} of {prompt} prompt tokens from the prefill pod"
        );
        assert!(local <= LOCAL_SLACK, "stream {stream}: the decode pod computed {local} prompt tokens itself");
        let prefilled = after.prefill_local - before.prefill_local;
        assert!(prefilled >= prompt / 2.0, "stream {stream}: the prefill pod computed {prefilled} prompt tokens");
    }
    assert_eq!(stack.stat(stat::PD_SPLIT).await, Some(2));
    assert_eq!(stack.stat(stat::PD_PREFILL_OK).await, Some(2));
    assert_eq!(fallbacks(&stack).await, 0);

    // The prefill pod dies between two of the agent's scrapes: the agent is stopped
    // first, so that the gateway still counts on the pod, and the filter's prefill leg
    // fails. The request is served whole on the decode pod.
    stack.kill_agent();
    pair.prefill.kill();
    let before = Counts::read(&pair, &client).await;
    let reply = stack.post("/v1/chat/completions", chat("orphaned", false), &[]).await;
    let (text, prompt) = answer(&reply, false);
    let decision = reply.header("x-infergate-decision").unwrap_or_default().to_string();
    let after = Counts::after(&pair, &client, before, prompt).await;
    let fell_back = fallbacks(&stack).await;
    eprintln!("prefill pod killed: {text:?}; {before:?} -> {after:?}; {fell_back} fallback(s); {decision}");
    assert!(decision.contains("pd=split") && decision.contains("pd_fallback="), "{decision}");
    assert!(decision.contains(&format!("endpoints={decode}")), "{decision}");
    assert_eq!(fell_back, 1, "{decision}");
    let local = after.decode_local - before.decode_local;
    assert!(local >= prompt - LOCAL_SLACK, "the decode pod computed {local} of {prompt} prompt tokens itself");
    assert_eq!(after.decode_external, before.decode_external, "nothing was handed over");
    eprintln!("done after {:.1} s", started.elapsed().as_secs_f64());
}
