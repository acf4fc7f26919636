//! Faults around the gateway, end to end in real Envoy: overload, a pool with no pod
//! left, a hanging pod, a pod whose metrics freeze, a pod killed under concurrent load,
//! an agent that restarts, an Envoy hot restart, and a router config replaced through
//! LDS. `make chaos` runs the load cases longer
//! (`INFERGATE_CHAOS_REQUESTS`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use infergate_core::config::Criticality;
use infergate_e2e::client::read_reply;
use infergate_e2e::{ModelSpec, Reply, Stack, StackSpec, chat_body};
use serde_json::{Value, json};

/// Non-streamed requests sent while a pod is killed; `make chaos` sets 1,000.
fn chaos_requests() -> usize {
    std::env::var("INFERGATE_CHAOS_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(200)
}

async fn send(client: &reqwest::Client, url: &str, body: &Value, headers: &[(&str, &str)]) -> Reply {
    let mut request = client.post(format!("{url}/v1/chat/completions")).json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    read_reply(request.send().await.expect("the gateway answers")).await
}

/// Clients sending non-streamed chats back to back until stopped, each failure kept.
struct BackgroundLoad {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    clients: Vec<tokio::task::JoinHandle<Vec<String>>>,
}

impl BackgroundLoad {
    fn start(stack: &Stack, clients: usize) -> Self {
        let (stop, sent) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let clients = (0..clients)
            .map(|_| {
                let (client, url) = (stack.client().clone(), stack.gateway_url.clone());
                let (stop, sent) = (Arc::clone(&stop), Arc::clone(&sent));
                tokio::spawn(async move {
                    let mut failures = Vec::new();
                    while !stop.load(Ordering::SeqCst) {
                        let reply = send(&client, &url, &chat_body("m", "hello", 2), &[]).await;
                        sent.fetch_add(1, Ordering::SeqCst);
                        if reply.status != 200 {
                            failures.push(format!("{}: {}", reply.status, reply.body));
                        }
                    }
                    failures
                })
            })
            .collect();
        Self { stop, sent, clients }
    }

    async fn wait_for(&self, requests: usize) {
        while self.sent.load(Ordering::SeqCst) < requests {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops the clients; how many requests they sent, and the failed ones.
    async fn stop(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        let mut failures = Vec::new();
        for client in self.clients {
            failures.extend(client.await.unwrap());
        }
        (self.sent.load(Ordering::SeqCst), failures)
    }
}

/// Sends requests until one is routed on fresh signals, failing after 1 s from `since`.
async fn wait_for_signal_routing(stack: &Stack, since: Instant, what: &str) {
    loop {
        let reply = stack.chat("m", 1).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        if reply.header("x-infergate-decision").unwrap_or_default().contains("basis=signals") {
            return;
        }
        assert!(since.elapsed() < Duration::from_secs(1), "no signal routing {:?} after {what}", since.elapsed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn error_code(reply: &Reply) -> String {
    serde_json::from_str::<Value>(&reply.body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(String::from))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_pool_sheds_sheddable_requests_and_serves_the_others() {
    let spec = StackSpec {
        models: vec![ModelSpec::base("m", "a"), ModelSpec::base("batch", "a").with_criticality(Criticality::Sheddable)],
        ..StackSpec::default()
    };
    let stack = Stack::start(spec).await;
    let sheddable = [("x-infergate-criticality", "sheddable")];
    let body = chat_body("m", "hi", 1).to_string();
    assert_eq!(stack.post("/v1/chat/completions", body.clone(), &sheddable).await.status, 200, "idle: admitted");
    for &pod in &stack.fleet.pods {
        stack.pin(pod, 8.0, 16.0, 0.5).await;
    }
    stack
        .wait_until("the saturated pool to shed", Duration::from_secs(3), || async {
            stack.post("/v1/chat/completions", body.clone(), &sheddable).await.status == 429
        })
        .await;
    let shed = stack.post("/v1/chat/completions", body.clone(), &sheddable).await;
    assert_eq!((shed.status, error_code(&shed).as_str()), (429, "pool_saturated"), "{}", shed.body);
    assert_eq!(shed.header("retry-after"), Some("1"));
    let batch = stack.post("/v1/chat/completions", chat_body("batch", "hi", 1).to_string(), &[]).await;
    assert_eq!(batch.status, 429, "a sheddable model is shed without a header: {}", batch.body);
    let raised = [("x-infergate-criticality", "critical")];
    let batch = stack.post("/v1/chat/completions", chat_body("batch", "hi", 1).to_string(), &raised).await;
    assert_eq!(batch.status, 429, "a client cannot raise a model's criticality");
    for headers in [&[][..], &[("x-infergate-criticality", "critical")][..]] {
        let reply = stack.post("/v1/chat/completions", body.clone(), headers).await;
        assert_eq!(reply.status, 200, "standard and critical requests queue: {}", reply.body);
    }
    let bad = stack.post("/v1/chat/completions", body.clone(), &[("x-infergate-criticality", "urgent")]).await;
    assert_eq!((bad.status, error_code(&bad).as_str()), (400, "invalid_criticality"));
    assert!(stack.stat("infergate.requests.shed").await.unwrap_or(0) >= 3);
    for &pod in &stack.fleet.pods {
        stack.unpin(pod).await;
    }
    stack
        .wait_until("the pool to admit sheddable requests again", Duration::from_secs(3), || async {
            stack.post("/v1/chat/completions", body.clone(), &sheddable).await.status == 200
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_with_no_pod_left_answers_503_with_retry_after_and_never_hangs() {
    let stack = Stack::start(StackSpec::default()).await;
    for &pod in &stack.fleet.pods {
        stack.kill_pod(pod).await;
    }
    // Before and after the agent notices, every answer is a prompt 503.
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut last = None;
    while Instant::now() < deadline {
        let started = Instant::now();
        let reply = stack.chat("m", 1).await;
        assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
        assert_eq!(reply.status, 503, "{}", reply.body);
        last = Some(reply);
    }
    let last = last.expect("at least one request");
    assert_eq!(
        error_code(&last),
        "no_ready_endpoint",
        "the filter answers once the agent saw the pods go: {}",
        last.body
    );
    assert_eq!(last.header("retry-after"), Some("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_pod_times_out_by_the_route_and_new_requests_avoid_it() {
    let spec = StackSpec { request_timeout_ms: 2_000, ..StackSpec::default() };
    let stack = Stack::start(spec).await;
    let hung = stack.fleet.pods[0];
    stack.fault(hung, json!({"hang": true})).await;
    // Eight at once: the pool's least-loaded spreading gives the hung pod some.
    let (client, url) = (stack.client().clone(), stack.gateway_url.clone());
    let burst: Vec<_> = (0..8)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let started = Instant::now();
                let reply = send(&client, &url, &chat_body("m", "hi", 1), &[]).await;
                (reply, started.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..20 {
        let reply = stack.chat("m", 1).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_ne!(reply.served_by(), Some(hung.to_string().as_str()), "request {i} went to the hung pod");
    }
    let mut timed_out = 0;
    for task in burst {
        let (reply, took) = task.await.unwrap();
        if reply.status == 504 {
            timed_out += 1;
            assert!(took >= Duration::from_millis(1_900) && took < Duration::from_secs(5), "timed out after {took:?}");
        } else {
            assert_eq!(reply.status, 200, "{}", reply.body);
        }
    }
    assert!(timed_out >= 1, "no request of the burst reached the hung pod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_metrics_freeze_stops_attracting_its_conversations() {
    let stack = Stack::start(StackSpec::default()).await;
    let system = "You are a careful assistant who answers questions about GPUs. ".repeat(40);
    let turn = |i: usize| {
        json!({"model": "m", "max_tokens": 1, "messages": [
        {"role": "system", "content": system}, {"role": "user", "content": format!("question {i}")}]})
    };
    let owner =
        stack.post("/v1/chat/completions", turn(0).to_string(), &[]).await.served_by().unwrap_or_default().to_string();
    let owner_addr = *stack.fleet.pods.iter().find(|p| p.to_string() == owner).expect("a pod of the fleet");
    // Busy, and then frozen: a busy engine's counters move at every step.
    stack.pin(owner_addr, 0.0, 1.0, 0.1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut followed = 0;
    for i in 1..=10 {
        let reply = stack.post("/v1/chat/completions", turn(i).to_string(), &[]).await;
        followed += usize::from(reply.served_by() == Some(owner.as_str()));
    }
    assert!(followed >= 9, "before the freeze, {followed}/10 turns followed their prefix");
    stack.fault(owner_addr, json!({"freeze_metrics": true})).await;
    let max_age = stack.config.routing.signal_max_age_ms;
    tokio::time::sleep(Duration::from_millis(max_age + 500)).await;
    let mut on_owner = 0;
    let mut last = String::new();
    for i in 11..=30 {
        let reply = stack.post("/v1/chat/completions", turn(i).to_string(), &[]).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        on_owner += usize::from(reply.served_by() == Some(owner.as_str()));
        last = reply.header("x-infergate-decision").unwrap_or_default().to_string();
    }
    assert!(last.contains("basis=mixed"), "the frozen pod's signals are stale: {last}");
    assert!(on_owner <= 12, "{on_owner}/20 turns still went to the frozen pod; last decision: {last}");
    assert!(stack.agent_log().contains("metrics have not moved"), "the agent says why");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_killed_under_concurrent_load_loses_no_request() {
    let stack = Stack::start(StackSpec::default()).await;
    let total = chaos_requests();
    let load = BackgroundLoad::start(&stack, 16);
    load.wait_for(total / 4).await;
    stack.kill_pod(stack.fleet.pods[1]).await;
    load.wait_for(total).await;
    let (sent, failures) = load.stop().await;
    eprintln!("{sent} requests across the pod kill, {} failed", failures.len());
    assert!(failures.is_empty(), "{} of {sent} failed: {:?}", failures.len(), &failures[..failures.len().min(5)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_cut_by_a_pod_killed_mid_answer_are_counted() {
    let stack = Stack::start(StackSpec::default()).await;
    let victim = stack.fleet.pods[2].to_string();
    let client = stack.client().clone();
    let url = stack.gateway_url.clone();
    let started = Arc::new(AtomicUsize::new(0));
    let streams: Vec<_> = (0..16)
        .map(|i| {
            let (client, url, started) = (client.clone(), url.clone(), started.clone());
            tokio::spawn(async move {
                let body = json!({"model": "m", "stream": true, "max_tokens": 400,
                    "messages": [{"role": "user", "content": format!("stream {i}")}]});
                let response = client.post(format!("{url}/v1/chat/completions")).json(&body).send().await.unwrap();
                assert_eq!(response.status(), 200);
                let pod = response
                    .headers()
                    .get(infergate_core::wire::header::SERVED_BY)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_string();
                started.fetch_add(1, Ordering::SeqCst);
                // A cut stream ends with a body error or without its last event.
                let text = response.text().await.unwrap_or_default();
                (pod, text.contains("data: [DONE]"))
            })
        })
        .collect();
    while started.load(Ordering::SeqCst) < 16 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Every stream has its headers: the victim's can no longer move to another pod.
    stack.kill_pod(stack.fleet.pods[2]).await;
    let (mut on_victim, mut cut, mut elsewhere_cut) = (0, 0, 0);
    for stream in streams {
        let (pod, done) = stream.await.unwrap();
        if pod == victim {
            on_victim += 1;
            cut += usize::from(!done);
        } else {
            elsewhere_cut += usize::from(!done);
        }
    }
    eprintln!("{cut} of 16 streams were cut when their pod died mid-answer ({on_victim} were on it)");
    assert!(on_victim >= 1, "no stream went to the killed pod, so nothing was exercised");
    assert_eq!(cut, on_victim, "a stream on the killed pod completed, so the kill was not mid-answer");
    assert_eq!(elsewhere_cut, 0, "streams on other pods were cut");
    let reply = stack.chat("m", 1).await;
    assert_eq!(reply.status, 200, "the gateway serves on after the cut streams: {}", reply.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_restores_signal_routing_within_a_second() {
    let mut stack = Stack::start(StackSpec::default()).await;
    stack.kill_agent();
    let max_age = stack.config.routing.signal_max_age_ms;
    tokio::time::sleep(Duration::from_millis(max_age + 300)).await;
    let decision = stack.chat("m", 1).await.header("x-infergate-decision").unwrap_or_default().to_string();
    assert!(decision.contains("basis=load-only"), "{decision}");
    assert!(stack.stat("infergate.snapshot.age_ms").await.unwrap_or(0) >= max_age, "the age gauge shows the gap");
    let started = Instant::now();
    stack.start_agent().await;
    wait_for_signal_routing(&stack, started, "the agent restarted").await;
    eprintln!("signal routing back {:?} after the agent restarted", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envoy_hot_restart_fails_no_request_and_the_new_process_gets_the_snapshot() {
    let mut stack = Stack::start(StackSpec { hot_restart: true, ..StackSpec::default() }).await;
    let load = BackgroundLoad::start(&stack, 8);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stack.hot_restart(2).await;
    // The new process starts with empty shared data: the agent's next push fills it.
    wait_for_signal_routing(&stack, Instant::now(), "the old Envoy exited").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (sent, failures) = load.stop().await;
    eprintln!("{sent} requests across the hot restart, {} failed", failures.len());
    assert!(failures.is_empty(), "{} of {sent} failed: {:?}", failures.len(), &failures[..failures.len().min(5)]);
}

/// `count` chats with prompts no other request shares, each on its own connection so
/// that both workers serve some.
async fn unique_chats_on_fresh_connections(stack: &Stack, count: usize, tag: &str) {
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    for n in 0..count {
        let prompt = format!("{tag} {n}: ").repeat(40);
        let reply = send(&client, &stack.gateway_url, &chat_body("m", &prompt, 1), &[]).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
}

/// Prefix-record batches sent and queue deliveries they made, so far.
async fn prefix_sends(stack: &Stack) -> (u64, u64) {
    (
        stack.stat("infergate.prefix.batches").await.unwrap_or(0),
        stack.stat("infergate.prefix.enqueued").await.unwrap_or(0),
    )
}

/// A control plane changing the router's config makes Envoy start new plugin roots and
/// tear the old ones down. The old roots' prefix queues must leave the peer list: no one
/// drains them any more, so every record sent there would stay in Envoy's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_config_replaced_through_lds_leaves_no_dead_prefix_queue() {
    let listeners_dir = tempfile::tempdir().unwrap();
    let listeners = infergate_e2e::listener_file::ListenerFile::new(listeners_dir.path());
    let stack = Stack::start(StackSpec { bootstrap: Some(listeners.writer()), ..StackSpec::default() }).await;
    unique_chats_on_fresh_connections(&stack, 40, "before").await;

    listeners.edit_router_config(|plugin| plugin["max_body_bytes"] = json!(1024));
    // Envoy updates the listener in place: it drains the old filter chain for 1 s
    // (`--drain-time-s`), then tears its plugin roots down.
    let draining = || async { stack.envoy_stat("listener_manager.total_filter_chains_draining").await };
    stack
        .wait_until("the old filter chain to drain", Duration::from_secs(10), || async { draining().await == Some(1) })
        .await;
    stack
        .wait_until("the old filter chain to go", Duration::from_secs(10), || async { draining().await == Some(0) })
        .await;
    assert_eq!(stack.envoy_stat("listener_manager.listener_modified").await, Some(1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reply = send(&stack.client().clone(), &stack.gateway_url, &chat_body("m", &"x".repeat(2048), 1), &[]).await;
    assert_eq!(reply.status, 413, "the new config is not in force: {}", reply.body);

    // Both workers' new roots join; then each batch should reach the one other worker.
    unique_chats_on_fresh_connections(&stack, 20, "warm").await;
    let (batches, enqueued) = prefix_sends(&stack).await;
    unique_chats_on_fresh_connections(&stack, 60, "after").await;
    let (batches_after, enqueued_after) = prefix_sends(&stack).await;
    let (batches, enqueued) = (batches_after - batches, enqueued_after - enqueued);
    eprintln!("after the reload: {batches} batches made {enqueued} deliveries");
    assert!(batches >= 10, "only {batches} batches");
    assert!(enqueued <= batches, "{enqueued} deliveries for {batches} batches: a worker still sends to dead queues");
}
