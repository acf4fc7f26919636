//! The peers' own routers (`smg` 1.13.0 and `vllm-router` 0.1.17 from PyPI, installed
//! by `make peers`) start in front of model-sim pods and answer: a broken wheel, a
//! changed flag or a probe model-sim stops answering fails here, before a benchmark
//! runs for an hour on nothing. No timing is asserted; `make bench-peers` measures.

use infergate_harness::fleet::Fleet;
use infergate_harness::peer_router::{PeerGateway, PeerRouter, SESSION_HEADER};
use infergate_harness::stack::free_port;
use infergate_model_sim::engine::EngineProfile;
use infergate_model_sim::server::PodSpec;
use serde_json::json;

const MODEL: &str = "m";

/// One streamed chat through `gateway` in session `session`: the pod that served it,
/// after checking the answer is a whole OpenAI stream.
async fn chat(client: &reqwest::Client, gateway: &PeerGateway, session: &str) -> String {
    chat_about(client, gateway, session, "Say hello in four words, please.", 4).await
}

async fn chat_about(
    client: &reqwest::Client,
    gateway: &PeerGateway,
    session: &str,
    content: &str,
    tokens: u32,
) -> String {
    let body = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": tokens,
        "stream": true,
    });
    let response = client
        .post(format!("{}/v1/chat/completions", gateway.url()))
        .header(SESSION_HEADER, session)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", gateway.router.name(), gateway.log_tail()));
    let status = response.status();
    let served_by = response.headers().get("x-infergate-served-by").and_then(|v| v.to_str().ok()).map(String::from);
    let text = response.text().await.unwrap_or_default();
    assert_eq!(status, 200, "{}: {text}\n{}", gateway.router.name(), gateway.log_tail());
    assert!(text.contains("\"chat.completion.chunk\""), "{}: not a stream: {text}", gateway.router.name());
    assert!(text.trim_end().ends_with("data: [DONE]"), "{}: the stream did not end: {text}", gateway.router.name());
    served_by
        .unwrap_or_else(|| panic!("{}: the pod's x-infergate-served-by did not come through", gateway.router.name()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_peer_router_answers_in_front_of_model_sim_pods() {
    let logs = tempfile::tempdir().expect("a log directory");
    let client = reqwest::Client::new();
    for router in [
        PeerRouter::SmgCacheAware,
        PeerRouter::SmgPrefixHash,
        PeerRouter::VllmRouterCacheAware,
        PeerRouter::VllmRouterSticky,
    ] {
        let fleet = Fleet::start_serving(2, EngineProfile::TINY, 1.0, &[MODEL.to_string()], &[]).await;
        let pods: Vec<String> = fleet.pods.iter().map(ToString::to_string).collect();
        let gateway =
            PeerGateway::start(router, &fleet.pods, MODEL, logs.path()).await.unwrap_or_else(|e| panic!("{e}"));
        let first = chat(&client, &gateway, "session-1").await;
        assert!(pods.contains(&first), "{}: served by {first}, not one of {pods:?}", gateway.router.name());
        let again = chat(&client, &gateway, "session-1").await;
        if gateway.router == PeerRouter::VllmRouterSticky {
            assert_eq!(again, first, "sticky_least_loaded moved session-1 between two idle pods");
        }
    }
}

/// vllm-router's `kv_aware` in front of model-sim pods that publish their KV events as
/// vLLM does: a prompt whose blocks the events placed on a busy pod goes back to it,
/// where without them it would go to the least loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_aware_reads_the_kv_events_model_sim_publishes() {
    let logs = tempfile::tempdir().expect("a log directory");
    let endpoints: Vec<String> = (0..2).map(|_| format!("tcp://127.0.0.1:{}", free_port())).collect();
    let shaped = endpoints.clone();
    let publishing = move |index: usize, spec: PodSpec| PodSpec { kv_events: shaped.get(index).cloned(), ..spec };
    let fleet = Fleet::start_shaped(2, EngineProfile::TINY, 1.0, &[MODEL.to_string()], &[], &publishing).await;
    let kv_events = fleet.pods.iter().copied().zip(endpoints).collect();
    let router =
        PeerRouter::VllmRouterKvAware { kv_events, block_size: EngineProfile::TINY.block_size, session_ttl_s: None };
    let gateway = PeerGateway::start(router, &fleet.pods, MODEL, logs.path()).await.unwrap_or_else(|e| panic!("{e}"));
    let client = reqwest::Client::new();
    // Both pods idle: the least loaded, the first, gets the document.
    let document = "The quarterly report covers revenue, costs and the outlook for next year. ".repeat(12);
    let home = chat_about(&client, &gateway, "document", &document, 4).await;
    // A long answer keeps that pod busy (3,000 tokens at 2 ms: about 6 s).
    let busy = {
        let (client, url) = (client.clone(), format!("{}/v1/chat/completions", gateway.url()));
        tokio::spawn(async move {
            let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 3000});
            let response = client.post(url).header(SESSION_HEADER, "story").json(&body).send().await;
            response.map(|r| {
                let pod = r.headers().get("x-infergate-served-by").and_then(|v| v.to_str().ok()).map(String::from);
                (r.status(), pod)
            })
        })
    };
    // Past the 2 s that kv_aware's own speculative entries live
    // (`KvAwareConfig::speculative_ttl`): only the store events place the document now.
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    let again = chat_about(&client, &gateway, "question", &format!("{document} What was the outlook?"), 4).await;
    assert_eq!(
        again,
        home,
        "kv_aware sent the cached document to the idle pod: it did not read the events\n{}",
        gateway.log_tail()
    );
    let (status, story_pod) = busy.await.expect("the long answer's task").expect("the long answer");
    assert!(status.is_success(), "the long answer failed: {status}");
    // Else the document's pod was idle, and going back to it would prove nothing.
    assert_eq!(story_pod.as_deref(), Some(home.as_str()), "the long answer did not keep the document's pod busy");
}
