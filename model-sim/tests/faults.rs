//! Faults set through the admin API change what a pod does.

use std::sync::Arc;
use std::time::Duration;

use infergate_model_sim::engine::EngineProfile;
use infergate_model_sim::server::{Pod, PodSpec, serve};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Notify;

async fn start_pod() -> (String, reqwest::Client) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let pod = Pod::new(PodSpec::new(address, EngineProfile::TINY));
    tokio::spawn(serve(pod, listener, Arc::new(Notify::new())));
    (format!("http://{address}"), reqwest::Client::new())
}

async fn chat(client: &reqwest::Client, base: &str) -> Result<reqwest::Response, reqwest::Error> {
    client
        .post(format!("{base}/v1/chat/completions"))
        .timeout(Duration::from_millis(500))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}))
        .send()
        .await
}

async fn set_faults(client: &reqwest::Client, base: &str, faults: serde_json::Value) -> u16 {
    client.post(format!("{base}/admin/faults")).json(&faults).send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn an_error_rate_of_one_fails_every_request_with_the_chosen_status() {
    let (base, client) = start_pod().await;
    assert_eq!(set_faults(&client, &base, json!({"error_rate": 1.0, "error_status": 429})).await, 204);
    for _ in 0..5 {
        assert_eq!(chat(&client, &base).await.unwrap().status(), 429);
    }
    assert_eq!(set_faults(&client, &base, json!({"error_rate": 2.0})).await, 400, "out of range");
}

#[tokio::test]
async fn a_hanging_pod_never_answers() {
    let (base, client) = start_pod().await;
    set_faults(&client, &base, json!({"hang": true})).await;
    assert!(chat(&client, &base).await.unwrap_err().is_timeout());
}

#[tokio::test]
async fn frozen_metrics_stop_changing() {
    let (base, client) = start_pod().await;
    let metrics = || async { client.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap() };
    set_faults(&client, &base, json!({"freeze_metrics": true})).await;
    let frozen = metrics().await;
    for _ in 0..3 {
        assert_eq!(chat(&client, &base).await.unwrap().status(), 200);
    }
    assert_eq!(metrics().await, frozen);
    set_faults(&client, &base, json!({})).await;
    assert_ne!(metrics().await, frozen, "unfrozen metrics show the served requests");
}

#[tokio::test]
async fn streaming_reports_usage_when_asked() {
    let (base, client) = start_pod().await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                      "stream": true, "stream_options": {"include_usage": true}});
    let text =
        client.post(format!("{base}/v1/chat/completions")).json(&body).send().await.unwrap().text().await.unwrap();
    assert_eq!(text.matches("\"delta\"").count(), 3);
    assert!(text.contains("\"completion_tokens\":3"));
    assert!(text.trim_end().ends_with("data: [DONE]"));
}

/// A prompt that can never fit the KV cache is refused at once, as vLLM does, instead
/// of waiting forever.
#[tokio::test]
async fn a_prompt_longer_than_the_kv_cache_is_refused_not_queued_forever() {
    let (base, client) = start_pod().await;
    let capacity = EngineProfile::TINY.kv_capacity_tokens() as usize;
    let prompt = "x".repeat(capacity * 4 + 64);
    let response = client
        .post(format!("{base}/v1/chat/completions"))
        .timeout(Duration::from_secs(2))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("maximum context length"), "{body}");
    // A prompt that fits is still served.
    assert_eq!(chat(&client, &base).await.unwrap().status(), 200);
}

/// Real engines answer with random ids; two simulated pods must not both say
/// `chatcmpl-1`, or a client that keys on ids mixes their answers up.
#[tokio::test]
async fn two_pods_never_answer_with_the_same_completion_id() {
    let (first, client) = start_pod().await;
    let (second, _) = start_pod().await;
    let mut ids = std::collections::HashSet::new();
    for base in [&first, &second, &first, &second] {
        let body: serde_json::Value = chat(&client, base).await.unwrap().json().await.unwrap();
        let id = body["id"].as_str().unwrap().to_string();
        assert!(id.starts_with("chatcmpl-"), "{id}");
        assert!(ids.insert(id.clone()), "{id} answered twice");
    }
}
