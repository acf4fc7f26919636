//! Flow control end to end in real Envoy (2 workers): requests held while every pod is
//! saturated resume and complete once one has room; the queue's bound and its bands'
//! longest waits answer 503 (429 for sheddable) with `Retry-After` and a reason; a
//! client that leaves frees its place; both workers share one bound.

use std::time::{Duration, Instant};

use infergate_core::config::{BandSettings, FlowControlSettings};
use infergate_e2e::{Reply, Stack, StackSpec, chat_body};
use serde_json::Value;

fn flow(max_queued: u32, max_wait_ms: u64) -> FlowControlSettings {
    let mut flow = FlowControlSettings { enabled: true, max_queued, ..Default::default() };
    let band = BandSettings { max_wait_ms: Some(max_wait_ms), ..Default::default() };
    flow.bands.standard = band;
    flow.bands.sheddable = band;
    flow
}

async fn start(flow: FlowControlSettings) -> Stack {
    Stack::start(StackSpec { flow_control: flow, ..StackSpec::default() }).await
}

async fn saturate(stack: &Stack) {
    for &pod in &stack.fleet.pods {
        stack.pin(pod, 9.0, 16.0, 0.95).await;
    }
}

async fn free(stack: &Stack) {
    for &pod in &stack.fleet.pods {
        stack.unpin(pod).await;
    }
}

/// A chat sent on its own connection (so that Envoy spreads them over its workers).
fn spawn_chat(stack: &Stack, headers: &'static [(&'static str, &'static str)]) -> tokio::task::JoinHandle<Reply> {
    let url = format!("{}/v1/chat/completions", stack.gateway_url);
    tokio::spawn(async move {
        let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("a client");
        let mut request = client.post(url).json(&chat_body("m", "hello", 2));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        infergate_e2e::client::read_reply(request.send().await.expect("the gateway answers")).await
    })
}

async fn queued(stack: &Stack) -> u64 {
    stack.stat("infergate.flow.queued").await.unwrap_or(0)
}

fn error_code(reply: &Reply) -> String {
    serde_json::from_str::<Value>(&reply.body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(String::from))
        .unwrap_or_default()
}

/// Waits until the saturated pods are in the gateway's snapshot: a sheddable request
/// is held (flow control holds every band) and answered 429 when it expires.
async fn wait_for_saturation(stack: &Stack) {
    stack
        .wait_until("the gateway to see the pool saturated", Duration::from_secs(5), || async {
            let reply = stack
                .post(
                    "/v1/chat/completions",
                    chat_body("m", "probe", 1).to_string(),
                    &[("x-infergate-criticality", "sheddable")],
                )
                .await;
            reply.status == 429
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_requests_resume_and_complete_once_a_pod_has_room() {
    // Standard requests may wait 20 s; sheddable probes give up after 300 ms.
    let mut settings = flow(64, 20_000);
    settings.bands.sheddable.max_wait_ms = Some(300);
    let stack = start(settings).await;
    assert_eq!(stack.chat("m", 1).await.status, 200, "idle: routed at once");
    saturate(&stack).await;
    wait_for_saturation(&stack).await;
    let clients: Vec<_> = (0..4).map(|_| spawn_chat(&stack, &[])).collect();
    stack.wait_until("four requests held", Duration::from_secs(3), || async { queued(&stack).await >= 4 }).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(clients.iter().all(|c| !c.is_finished()), "held, not answered, while every pod is saturated");
    let freed = Instant::now();
    free(&stack).await;
    for client in clients {
        let reply = client.await.expect("the client task");
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    assert!(freed.elapsed() < Duration::from_secs(3), "released within {:?}", freed.elapsed());
    stack.wait_until("the queue to empty", Duration::from_secs(3), || async { queued(&stack).await == 0 }).await;
    assert!(stack.stat("infergate.flow.released").await.unwrap_or(0) >= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bound_and_the_longest_wait_answer_503_or_429_with_retry_after_and_a_reason() {
    let stack = start(flow(2, 400)).await;
    saturate(&stack).await;
    wait_for_saturation(&stack).await;
    stack.wait_until("the probes to leave", Duration::from_secs(3), || async { queued(&stack).await == 0 }).await;
    let started = Instant::now();
    let clients: Vec<_> = (0..3).map(|_| spawn_chat(&stack, &[("x-infergate-criticality", "standard")])).collect();
    let mut replies = Vec::new();
    for client in clients {
        replies.push(client.await.expect("the client task"));
    }
    let reasons: Vec<String> =
        replies.iter().map(|r| r.header("x-infergate-queue-reason").unwrap_or("").into()).collect();
    for reply in &replies {
        assert_eq!(reply.status, 503, "{}", reply.body);
        assert_eq!(reply.header("retry-after"), Some("1"));
        assert_eq!(error_code(reply), reply.header("x-infergate-queue-reason").unwrap_or_default());
    }
    assert_eq!(reasons.iter().filter(|r| *r == "queue_full").count(), 1, "{reasons:?}: two places, three requests");
    assert_eq!(reasons.iter().filter(|r| *r == "expired").count(), 2, "{reasons:?}");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(400) && waited < Duration::from_secs(3), "expired after {waited:?}");
    let sheddable = spawn_chat(&stack, &[("x-infergate-criticality", "sheddable")]).await.expect("the client task");
    assert_eq!((sheddable.status, error_code(&sheddable).as_str()), (429, "expired"), "{}", sheddable.body);
    assert!(stack.stat("infergate.flow.dropped.queue_full").await.unwrap_or(0) >= 1);
    assert!(stack.stat("infergate.flow.dropped.expired").await.unwrap_or(0) >= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_while_held_frees_its_place() {
    let stack = start(flow(1, 20_000)).await;
    saturate(&stack).await;
    let url = format!("{}/v1/chat/completions", stack.gateway_url);
    // A client that gives up after 300 ms, until one was held when it left.
    stack
        .wait_until("a held request to be cancelled", Duration::from_secs(5), || async {
            let client = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().expect("a client");
            let _ = client.post(&url).json(&chat_body("m", "hello", 2)).send().await;
            stack.stat("infergate.flow.dropped.cancelled").await.unwrap_or(0) >= 1
        })
        .await;
    stack.wait_until("its place to be free", Duration::from_secs(2), || async { queued(&stack).await == 0 }).await;
    // The one place is free: the next request is held, not refused.
    let held = spawn_chat(&stack, &[]);
    stack
        .wait_until("the next request to be held", Duration::from_secs(2), || async { queued(&stack).await == 1 })
        .await;
    free(&stack).await;
    let reply = held.await.expect("the client task");
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_workers_share_one_bound() {
    let stack = start(flow(2, 20_000)).await;
    saturate(&stack).await;
    wait_for_saturation(&stack).await;
    stack.wait_until("the probes to leave", Duration::from_secs(3), || async { queued(&stack).await == 0 }).await;
    // Eight requests on their own connections, over both workers: two places in all.
    let clients: Vec<_> = (0..8).map(|_| spawn_chat(&stack, &[])).collect();
    stack.wait_until("two requests held", Duration::from_secs(3), || async { queued(&stack).await == 2 }).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused: Vec<&tokio::task::JoinHandle<Reply>> = clients.iter().filter(|c| c.is_finished()).collect();
    assert_eq!(refused.len(), 6, "six answered at once: the bound is the Envoy's, not a worker's");
    assert_eq!(queued(&stack).await, 2);
    free(&stack).await;
    let mut statuses = Vec::new();
    for client in clients {
        statuses.push(client.await.expect("the client task").status);
    }
    statuses.sort_unstable();
    assert_eq!(statuses, vec![200, 200, 503, 503, 503, 503, 503, 503]);
}
