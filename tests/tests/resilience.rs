//! Failures around the gateway: a dead pod, a dead agent, spoofed headers.

use std::time::Duration;

use infergate_e2e::{Stack, StackSpec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_best_pod_loses_no_request() {
    let stack = Stack::start(StackSpec::default()).await;
    let pods = stack.fleet.pods.clone();
    let best = pods[0];
    stack.favour(best, &pods).await;
    stack
        .wait_until("routing to prefer the best pod", Duration::from_secs(3), || async {
            stack.chat("m", 1).await.served_by() == Some(&best.to_string())
        })
        .await;
    stack.kill_pod(best).await;
    // Right after the kill the snapshot still ranks the dead pod first: retries carry it.
    for i in 0..30 {
        let reply = stack.chat("m", 1).await;
        assert_eq!(reply.status, 200, "request {i} failed: {}", reply.body);
        assert_ne!(reply.served_by(), Some(best.to_string().as_str()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_agent_gone_requests_keep_succeeding_on_load_alone() {
    let mut stack = Stack::start(StackSpec::default()).await;
    assert!(stack.chat("m", 1).await.header("x-infergate-decision").unwrap_or_default().contains("basis=signals"));
    stack.kill_agent();
    let max_age = stack.config.routing.signal_max_age_ms;
    let deadline = std::time::Instant::now() + Duration::from_millis(max_age * 2);
    let mut last_basis = String::new();
    while std::time::Instant::now() < deadline {
        let reply = stack.chat("m", 1).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        last_basis = reply.header("x-infergate-decision").unwrap_or_default().to_string();
    }
    assert!(last_basis.contains("basis=load-only"), "{last_basis}");
    // Load-only routing still spreads over the pool.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..40 {
        seen.insert(stack.chat("m", 1).await.served_by().unwrap_or_default().to_string());
    }
    assert!(seen.len() >= 2, "load-only routing used only {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_routing_headers_never_reach_the_decision_or_the_pod() {
    let stack = Stack::start(StackSpec::default()).await;
    let pods: Vec<String> = stack.fleet.pods.iter().map(ToString::to_string).collect();
    let admin = stack.config.gateway.admin.to_string();
    let control = stack.config.gateway.control.to_string();
    for target in [&admin, &control] {
        let reply = stack
            .post(
                "/v1/chat/completions",
                infergate_e2e::chat_body("m", "hi", 1).to_string(),
                &[
                    ("x-gateway-destination-endpoint", target.as_str()),
                    ("x-infergate-pool", "a"),
                    ("x-gateway-spoofed", "yes"),
                ],
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(pods.contains(&reply.served_by().unwrap_or_default().to_string()));
        let ranked = reply.header("x-sim-echo-x-gateway-destination-endpoint").unwrap_or_default();
        assert!(!ranked.contains(target.as_str()), "the spoofed target reached the header: {ranked}");
        assert_eq!(reply.header("x-sim-echo-x-gateway-spoofed"), None, "a client x-gateway-* header reached the pod");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_naming_the_admin_and_control_ports_cannot_send_traffic_there() {
    use infergate_core::endpoint::Endpoint;
    use infergate_core::snapshot::{PodSignals, PodState};

    let mut stack = Stack::start(StackSpec::default()).await;
    stack.kill_agent();
    let pods: Vec<String> = stack.fleet.pods.iter().map(ToString::to_string).collect();
    let intruders = [stack.config.gateway.admin, stack.config.gateway.control];
    // A compromised or buggy agent: the real pods look full, the admin and control
    // listeners look idle, so the filter ranks the intruders first.
    let mut snapshot = stack.snapshot_favouring(intruders[0], u64::MAX / 2);
    let scraped_at_ms = snapshot.created_at_ms;
    for address in intruders {
        snapshot.pools[0].pods.push(PodState::scraped(Endpoint::new(address), scraped_at_ms, PodSignals::default()));
    }
    let token = std::fs::read_to_string(stack.path("token")).unwrap();
    assert_eq!(stack.push_snapshot(Some(token.trim()), snapshot.encode().unwrap()).await, 204);
    let mut ranked_an_intruder = false;
    for i in 0..20 {
        let reply = stack.chat("m", 1).await;
        let decision = reply.header("x-infergate-decision").unwrap_or_default().to_string();
        ranked_an_intruder |= intruders.iter().any(|a| decision.contains(&format!("chosen={a}")));
        assert_eq!(reply.status, 200, "request {i}: {}", reply.body);
        let served_by = reply.served_by().unwrap_or_default().to_string();
        assert!(pods.contains(&served_by), "request {i} was served by {served_by:?}, not a pool member");
    }
    assert!(ranked_an_intruder, "the filter never chose an intruder, so the cluster's guard was not exercised");
}
