//! Routing through real Envoy follows what the pods report.

use std::time::{Duration, Instant};

use infergate_e2e::{ModelSpec, Stack, StackSpec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_to_the_pod_the_snapshot_favours_and_follow_when_it_changes() {
    let stack = Stack::start(StackSpec::default()).await;
    let pods = stack.fleet.pods.clone();
    let (first_best, second_best) = (pods[1], pods[3]);
    stack.favour(first_best, &pods).await;
    stack.wait_for_favour(first_best, Duration::from_secs(3)).await;

    let count = stack.count_favoured(first_best, 100, 95).await;
    eprint!("{}", count.report);
    assert!(count.met, "short of 95/100:\n{}", count.report);

    stack.favour(second_best, &pods).await;
    let changed = Instant::now();
    stack
        .wait_until("routing to follow the new metrics", Duration::from_secs(1), || async {
            stack.chat("m", 1).await.served_by() == Some(&second_best.to_string())
        })
        .await;
    eprintln!("routing followed the metrics change in {:?}", changed.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_model_lands_only_on_its_pool_and_the_model_header_reaches_the_pod() {
    let spec = StackSpec {
        pools: vec![("alpha", 2), ("beta", 2)],
        models: vec![
            ModelSpec::base("llama-8b", "alpha"),
            ModelSpec::lora("sql-lora", "alpha", "sql-lora"),
            ModelSpec::base("qwen-7b", "beta"),
        ],
        ..StackSpec::default()
    };
    let stack = Stack::start(spec).await;
    let alpha: Vec<String> = stack.fleet.pods[..2].iter().map(ToString::to_string).collect();
    let beta: Vec<String> = stack.fleet.pods[2..].iter().map(ToString::to_string).collect();
    for (model, pool) in [("llama-8b", &alpha), ("sql-lora", &alpha), ("qwen-7b", &beta)] {
        for _ in 0..10 {
            let reply = stack.chat(model, 1).await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            let pod = reply.served_by().unwrap_or_default().to_string();
            assert!(pool.contains(&pod), "{model} went to {pod}, outside its pool {pool:?}");
            assert_eq!(reply.header("x-sim-echo-x-gateway-model-name"), Some(model));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ranked_header_lists_three_pods_and_models_are_listed() {
    let stack = Stack::start(StackSpec::default()).await;
    let reply = stack.chat("m", 1).await;
    let ranked = reply.header("x-sim-echo-x-gateway-destination-endpoint").unwrap_or_default();
    assert_eq!(ranked.split(',').count(), 3, "{ranked}");
    assert_eq!(ranked.split(',').next(), reply.served_by());

    let models = stack.client().get(format!("{}/v1/models", stack.gateway_url)).send().await.unwrap();
    let body: serde_json::Value = models.json().await.unwrap();
    assert_eq!(body["data"][0]["id"], "m");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_is_passed_through_unbuffered() {
    let spec = StackSpec {
        profile: infergate_model_sim::engine::EngineProfile {
            itl_base_ms: 50.0,
            itl_per_seq_ms: 0.0,
            ..infergate_model_sim::engine::EngineProfile::TINY
        },
        ..StackSpec::default()
    };
    let stack = Stack::start(spec).await;
    let mut body = infergate_e2e::chat_body("m", "stream please", 20);
    body["stream"] = serde_json::Value::Bool(true);
    let started = Instant::now();
    let mut response =
        stack.client().post(format!("{}/v1/chat/completions", stack.gateway_url)).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers().get("content-type").and_then(|v| v.to_str().ok()), Some("text/event-stream"));
    let first = response.chunk().await.unwrap().expect("a first chunk");
    let first_at = started.elapsed();
    let mut text = String::from_utf8_lossy(&first).to_string();
    while let Some(chunk) = response.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let total = started.elapsed();
    // 20 tokens at 50 ms: the sim needs about a second; the first chunk must not wait.
    assert!(total >= Duration::from_millis(900), "generation took only {total:?}");
    assert!(first_at < total / 2, "first chunk at {first_at:?} of {total:?}: buffered");
    assert_eq!(text.matches("chat.completion.chunk").count(), 20);
    assert!(text.trim_end().ends_with("data: [DONE]"));
}

/// A body sent in pieces with pauses reaches the filter as several callbacks. The
/// scanner reads each piece as it arrives and never needs the whole-body parse; a
/// shape it leaves to that parse (an escaped key) is still routed, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_in_pieces_is_scanned_as_it_arrives() {
    let stack = Stack::start(StackSpec::default()).await;
    let text = "lorem ipsum dolor ".repeat(1_500); // within the simulated model's context
    let body = serde_json::json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": text}]});
    let body = body.to_string().into_bytes();
    assert!(body.len() > 25_000);
    let pieces: Vec<Vec<u8>> = body.chunks(body.len() / 8 + 1).map(<[u8]>::to_vec).collect();
    let paced = futures::stream::unfold(pieces.into_iter(), |mut pieces| async move {
        let piece = pieces.next()?;
        tokio::time::sleep(Duration::from_millis(15)).await;
        Some((Ok::<_, std::io::Error>(piece), pieces))
    });
    let reply = stack.post("/v1/chat/completions", reqwest::Body::wrap_stream(paced), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(stack.stat("infergate.requests.full_parses").await, Some(0));

    let escaped_key = r#"{"mod\u0065l":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}"#;
    let reply = stack.post("/v1/chat/completions", escaped_key, &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(stack.stat("infergate.requests.full_parses").await, Some(1));
}

/// The router reads each answer's `usage` to learn the pool's characters per token,
/// in Envoy's response-body callbacks: streams with `include_usage` and whole answers
/// still arrive complete, and the learned ratio is exported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_read_without_cutting_answers_and_the_ratio_is_exported() {
    let stack = Stack::start(StackSpec::default()).await;
    let prompt = "the quick brown fox jumps over the lazy dog ".repeat(20);
    for stream in [true, false, true, true] {
        let body = serde_json::json!({
            "model": "m", "max_tokens": 4, "stream": stream, "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": prompt}],
        });
        let reply = stack.post("/v1/chat/completions", body.to_string(), &[]).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        if stream {
            assert!(reply.body.trim_end().ends_with("data: [DONE]"), "a cut stream: {}", reply.body);
            assert!(reply.body.contains("\"usage\""), "{}", reply.body);
        } else {
            let json: serde_json::Value = serde_json::from_str(&reply.body).expect("a whole JSON answer");
            assert!(json["usage"]["prompt_tokens"].as_u64().is_some_and(|t| t > 0), "{json}");
        }
    }
    let milli = stack.stat("infergate.pool.a.chars_per_token_milli").await.unwrap_or(0);
    assert!((2_000..=8_000).contains(&milli), "characters per token × 1000: {milli}");
}

/// A pod without a LoRA adapter answers 404 (vLLM, when the adapter is not loaded
/// there). The agent reads each pod's `/v1/models`: adapter requests go only to the
/// pods that list the adapter, even when the other pod is the one routing favours. An
/// adapter no pod lists is retried on the other ranked pod, and its 404 reaches the
/// client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lora_request_goes_only_to_a_pod_whose_model_list_has_the_adapter() {
    use infergate_core::config::Engine;
    use infergate_e2e::fleet::Fleet;
    use infergate_model_sim::engine::EngineProfile;

    let base = ["m".to_string()];
    let with_adapter = Fleet::start_serving(1, EngineProfile::TINY, 1.0, &base, &["sql-lora".to_string()]).await;
    let without = Fleet::start_serving(1, EngineProfile::TINY, 1.0, &base, &[]).await;
    let (holder, lacking) = (with_adapter.pods[0], without.pods[0]);
    let spec = StackSpec {
        models: vec![
            ModelSpec::base("m", "a"),
            ModelSpec::lora("sql-lora", "a", "sql-lora"),
            // Declared, and served by neither pod.
            ModelSpec::lora("gone-lora", "a", "gone-lora"),
            ModelSpec::base("m-missing", "a"),
        ],
        pools: vec![("a", 2)],
        external_pods: Some((Engine::Vllm, vec![holder, lacking])),
        ..StackSpec::default()
    };
    let stack = Stack::start(spec).await;
    stack.favour(lacking, &[holder, lacking]).await;
    stack
        .wait_until("routing to favour the pod without the adapter", Duration::from_secs(3), || async {
            // Idle pods tie at first: one answer from it could be chance.
            for _ in 0..5 {
                if stack.chat("m", 1).await.served_by() != Some(&lacking.to_string()) {
                    return false;
                }
            }
            true
        })
        .await;
    let retries_before = stack.envoy_stat("cluster.pool-a.upstream_rq_retry").await.unwrap_or(0);
    for i in 0..20 {
        let reply = stack.chat("sql-lora", 1).await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.body);
        assert_eq!(reply.served_by(), Some(holder.to_string().as_str()));
        let ranked = reply.header("x-sim-echo-x-gateway-destination-endpoint").unwrap_or_default();
        assert_eq!(ranked, holder.to_string(), "request {i}: the pod without the adapter was ranked: {ranked}");
    }
    assert_eq!(
        stack.envoy_stat("cluster.pool-a.upstream_rq_retry").await.unwrap_or(0) - retries_before,
        0,
        "no request was tried on the pod without the adapter"
    );
    // An adapter no pod lists: nothing is known either way, the other ranked pod is
    // tried too, and the engines' 404 reaches the client.
    let reply = stack.chat("gone-lora", 1).await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    let retried = stack.envoy_stat("cluster.pool-a.upstream_rq_retry").await.unwrap_or(0) - retries_before;
    assert!(retried >= 1, "the 404 was not retried");
    // A base model's 404 is returned at once: no pod of its pool would serve it.
    let reply = stack.chat("m-missing", 1).await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(reply.served_by(), Some(lacking.to_string().as_str()), "answered by the chosen pod, not a retry");
    assert_eq!(stack.envoy_stat("cluster.pool-a.upstream_rq_retry").await.unwrap_or(0) - retries_before, retried);
}
