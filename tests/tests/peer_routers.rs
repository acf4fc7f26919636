//! The peers' own routers (`smg` 1.13.0 and `vllm-router` 0.1.17 from PyPI, installed
//! by `make peers`) start in front of model-sim pods and answer: a broken wheel, a
//! changed flag or a probe model-sim stops answering fails here, before a benchmark
//! runs for an hour on nothing. No timing is asserted; `make bench-peers` measures.

use infergate_harness::fleet::Fleet;
use infergate_harness::peer_router::{PeerGateway, PeerRouter, SESSION_HEADER};
use infergate_model_sim::engine::EngineProfile;
use serde_json::json;

const MODEL: &str = "m";

/// One streamed chat through `gateway` in session `session`: the pod that served it,
/// after checking the answer is a whole OpenAI stream.
async fn chat(client: &reqwest::Client, gateway: &PeerGateway, session: &str) -> String {
    let body = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say hello in four words, please."}],
        "max_tokens": 4,
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
        let gateway = PeerGateway::start(router, &fleet.pods, MODEL, logs.path()).await;
        let first = chat(&client, &gateway, "session-1").await;
        assert!(pods.contains(&first), "{}: served by {first}, not one of {pods:?}", gateway.router.name());
        let again = chat(&client, &gateway, "session-1").await;
        if gateway.router == PeerRouter::VllmRouterSticky {
            assert_eq!(again, first, "sticky_least_loaded moved session-1 between two idle pods");
        }
    }
}
