//! Prefill/decode disaggregation between simulated pods: the two legs sent by hand as
//! vLLM's toy proxy sends them, the KV handed over once, the roles, an expired lease,
//! and llm-d's sidecar on the `model-sim` binary.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use infergate_model_sim::engine::EngineProfile;
use infergate_model_sim::server::{KvRole, PdSettings, Pod, PodSpec, serve};
use infergate_signals::exposition::parse;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// 5,000 prompt tokens per second at half real time: a 4,000-token prompt takes 0.4 s
/// to prefill whole; its transfer (500 MB at 25 GB/s) 10 ms.
const TIME_SCALE: f64 = 0.5;
const PROMPT_TOKENS: u64 = 4_000;

async fn start_pod(pd: PdSettings) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let profile = EngineProfile { prefill_tokens_per_s: 5_000.0, ..EngineProfile::TINY };
    let pod = Pod::new(PodSpec { time_scale: TIME_SCALE, pd, ..PodSpec::new(address, profile) });
    tokio::spawn(serve(pod, listener, Arc::new(Notify::new())));
    address
}

fn with_role(role: KvRole) -> PdSettings {
    PdSettings { role, ..PdSettings::default() }
}

/// A chat request whose prompt is `PROMPT_TOKENS` tokens ("<|user|>" and the text).
fn chat(letter: char, extra: Value) -> Value {
    let content: String = std::iter::repeat_n(letter, PROMPT_TOKENS as usize * 4 - 8).collect();
    let mut body = json!({"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 8});
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    body
}

fn prefill_leg(letter: char) -> Value {
    chat(
        letter,
        json!({"max_tokens": 1, "stream": false, "kv_transfer_params": {
            "do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null,
            "remote_block_ids": null, "remote_host": null, "remote_port": null}}),
    )
}

async fn post(address: SocketAddr, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{address}/v1/chat/completions"))
        .timeout(Duration::from_secs(10))
        .json(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// Seconds to the first streamed token, and the whole stream.
async fn stream_ttft(address: SocketAddr, body: &Value) -> (f64, String) {
    let started = Instant::now();
    let mut response =
        reqwest::Client::new().post(format!("http://{address}/v1/chat/completions")).json(body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut text = String::new();
    let mut first = None;
    while let Some(chunk) = response.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
        if first.is_none() && text.contains("\"delta\"") {
            first = Some(started.elapsed().as_secs_f64());
        }
    }
    (first.expect("a token"), text)
}

async fn metric(address: SocketAddr, name: &str) -> f64 {
    let text = reqwest::get(format!("http://{address}/metrics")).await.unwrap().text().await.unwrap();
    parse(&text).unwrap().iter().find(|s| s.name == name).map(|s| s.value).unwrap_or_else(|| panic!("no {name}"))
}

#[tokio::test]
async fn a_decode_leg_gets_its_first_token_far_sooner_than_a_whole_request_and_its_kv_moves_once() {
    let prefill = start_pod(with_role(KvRole::Producer)).await;
    let decode = start_pod(with_role(KvRole::Consumer)).await;
    let (whole_ttft, _) = stream_ttft(decode, &chat('a', json!({"stream": true}))).await;

    let (status, answer) = post(prefill, &prefill_leg('b')).await;
    assert_eq!(status, 200, "{answer}");
    let params = &answer["kv_transfer_params"];
    assert_eq!(params["do_remote_prefill"], true);
    assert_eq!(params["do_remote_decode"], false);
    assert_eq!(params["remote_host"], "127.0.0.1");
    assert_eq!(params["remote_port"], prefill.port());
    assert_eq!(params["remote_engine_id"], prefill.to_string());
    assert_eq!(params["remote_request_id"], answer["id"]);
    assert_eq!(params["remote_block_ids"].as_array().unwrap().len() as u64, PROMPT_TOKENS / 16);
    assert_eq!(params["tp_size"], 1);

    let decode_leg = chat('b', json!({"stream": true, "kv_transfer_params": params}));
    let (decode_ttft, text) = stream_ttft(decode, &decode_leg).await;
    assert_eq!(text.matches("\"delta\"").count(), 8, "{text}");
    eprintln!("TTFT on the decode pod: whole request {whole_ttft:.3} s, decode leg {decode_ttft:.3} s");
    assert!(decode_ttft * 5.0 < whole_ttft, "whole {whole_ttft:.3} s, decode leg {decode_ttft:.3} s");

    // The KV was handed over: a second decode leg with the same params finds none.
    let (status, error) = post(decode, &chat('b', json!({"kv_transfer_params": params}))).await;
    assert_eq!(status, 500, "{error}");
    assert_eq!(error["error"]["code"], "kv_transfer_failed", "{error}");

    assert_eq!(metric(prefill, "model_sim:pd_prefill_legs_total").await, 1.0);
    assert_eq!(metric(decode, "model_sim:pd_decode_legs_total").await, 1.0);
    assert_eq!(metric(decode, "vllm:nixl_num_failed_transfers_total").await, 1.0);
    // Nothing of the prompt was cached on the decode pod: all of it moved.
    assert_eq!(metric(decode, "vllm:nixl_bytes_transferred_sum").await, (PROMPT_TOKENS * 131_072) as f64);
}

#[tokio::test]
async fn each_role_refuses_the_other_leg_and_serves_plain_requests() {
    let producer = start_pod(with_role(KvRole::Producer)).await;
    let consumer = start_pod(with_role(KvRole::Consumer)).await;
    let decode_params = json!({"do_remote_prefill": true, "remote_host": "127.0.0.1",
                               "remote_port": producer.port(), "remote_request_id": "chatcmpl-0"});
    for (pod, body) in
        [(consumer, prefill_leg('c')), (producer, chat('c', json!({"kv_transfer_params": decode_params})))]
    {
        let (status, error) = post(pod, &body).await;
        assert_eq!(status, 400, "{error}");
        assert_eq!(error["error"]["param"], "kv_transfer_params", "{error}");
    }
    let mut incomplete = decode_params.clone();
    incomplete.as_object_mut().unwrap().remove("remote_request_id");
    let (status, error) = post(consumer, &chat('c', json!({"kv_transfer_params": incomplete}))).await;
    assert_eq!(status, 400, "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains("remote_request_id"), "{error}");
    for pod in [producer, consumer] {
        assert_eq!(post(pod, &chat('c', json!({"max_tokens": 2}))).await.0, 200);
    }
}

#[tokio::test]
async fn a_decode_leg_fails_when_its_kv_expired_or_its_prefill_pod_is_gone() {
    // A lease of 20 ms of engine time, 10 ms real.
    let prefill = start_pod(PdSettings { lease_s: 0.02, ..with_role(KvRole::Producer) }).await;
    let decode = start_pod(with_role(KvRole::Consumer)).await;
    let (_, answer) = post(prefill, &prefill_leg('d')).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let params = &answer["kv_transfer_params"];
    let (status, error) = post(decode, &chat('d', json!({"kv_transfer_params": params}))).await;
    assert_eq!((status, error["error"]["code"].as_str()), (500, Some("kv_transfer_failed")), "{error}");
    assert_eq!(metric(prefill, "vllm:nixl_num_kv_expired_reqs_total").await, 1.0);

    let gone = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let mut params = params.clone();
    params["remote_port"] = json!(gone.port());
    let (status, error) = post(decode, &chat('d', json!({"kv_transfer_params": params}))).await;
    assert_eq!(status, 500, "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains(&gone.port().to_string()), "{error}");
}

/// Two free consecutive ports for the binary's pods.
fn free_port_pair() -> u16 {
    let start = 27_000 + (std::process::id() % 400) as u16 * 5;
    (start..start + 2_000)
        .step_by(2)
        .find(|&port| {
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
                && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok()
        })
        .expect("two free ports")
}

#[tokio::test]
async fn the_sidecar_sends_the_prefill_leg_to_the_named_pod_then_decodes_here() {
    let port = free_port_pair();
    let mut sim = Command::new(env!("CARGO_BIN_EXE_model-sim"))
        .args(["--pods", "2", "--base-port", &port.to_string(), "--profile", "tiny"])
        .args(["--pod-override", "0:kv_role=producer", "--pod-override", "1:kv_role=consumer,pd_sidecar=true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start model-sim");
    let prefill: SocketAddr = ([127, 0, 0, 1], port).into();
    let decode: SocketAddr = ([127, 0, 0, 1], port + 1).into();
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.get(format!("http://{decode}/v1/models")).send().await.is_err() {
        assert!(Instant::now() < deadline, "model-sim did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let send = |prefiller: Option<String>| {
        let mut request = client.post(format!("http://{decode}/v1/chat/completions")).json(&json!({
            "model": "m", "messages": [{"role": "user", "content": "x".repeat(2_000)}], "max_tokens": 5,
            "stream": true, "stream_options": {"include_usage": true},
        }));
        if let Some(prefiller) = prefiller {
            request = request.header("x-prefiller-host-port", prefiller);
        }
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };

    let (status, text) = send(Some(prefill.to_string())).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(text.matches("\"delta\"").count(), 5, "{text}");
    assert!(text.contains("\"completion_tokens\":5"), "{text}");
    assert_eq!(metric(prefill, "model_sim:pd_prefill_legs_total").await, 1.0);
    assert_eq!(metric(decode, "model_sim:pd_decode_legs_total").await, 1.0);

    // A prefill pod that refuses the leg: its answer comes back as it is.
    let (status, text) = send(Some(decode.to_string())).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("kv_transfer_params"), "{text}");
    // One that is not there: a bad gateway.
    let gone = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let (status, text) = send(Some(gone.to_string())).await;
    assert_eq!(status, 502, "{text}");
    // Without the header the request is served whole.
    assert_eq!(send(None).await.0, 200);
    assert_eq!(metric(decode, "model_sim:pd_decode_legs_total").await, 1.0);
    assert_eq!(metric(prefill, "model_sim:pd_prefill_legs_total").await, 1.0);
    let _ = sim.kill();
    let _ = sim.wait();
}
