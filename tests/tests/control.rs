//! The control listener admits only authenticated, valid snapshots.

use std::time::Duration;

use infergate_core::config::RoutingSettings;
use infergate_e2e::stack::TOKEN;
use infergate_e2e::{Stack, StackSpec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pushes_are_refused_and_routing_keeps_the_last_good_snapshot() {
    // No agent: this test is the only one pushing. Signals stay fresh for the whole test.
    let stack = Stack::start(StackSpec {
        start_agent: false,
        routing: RoutingSettings { signal_max_age_ms: 60_000, ..RoutingSettings::default() },
        ..StackSpec::default()
    })
    .await;
    let best = stack.fleet.pods[2];
    let good = stack.snapshot_favouring(best, 1).encode().unwrap();
    assert_eq!(stack.push_snapshot(Some(TOKEN), good).await, 204);
    stack
        .wait_until("routing to follow the pushed snapshot", Duration::from_secs(3), || async {
            stack.chat("m", 1).await.served_by() == Some(&best.to_string())
        })
        .await;
    let accepted = stack.stat("infergate.control.accepted").await.unwrap_or(0);

    let mut other_best = stack.snapshot_favouring(stack.fleet.pods[0], 2).encode().unwrap();
    assert_eq!(stack.push_snapshot(None, other_best.clone()).await, 401);
    assert_eq!(stack.push_snapshot(Some("wrong-token"), other_best.clone()).await, 401);
    assert_eq!(stack.push_snapshot(Some(TOKEN), b"\xc1 garbage".to_vec()).await, 400);
    assert_eq!(stack.push_snapshot(Some(TOKEN), Vec::new()).await, 400);
    other_best.truncate(other_best.len() / 2);
    assert_eq!(stack.push_snapshot(Some(TOKEN), other_best).await, 400);
    assert_eq!(stack.stat("infergate.control.accepted").await.unwrap_or(0), accepted);
    assert!(stack.stat("infergate.control.unauthorized").await.unwrap_or(0) >= 2);
    assert!(stack.stat("infergate.control.invalid").await.unwrap_or(0) >= 3);

    // A replay: a valid, authenticated snapshot whose sequence is not newer.
    let replay = stack.snapshot_favouring(stack.fleet.pods[0], 1).encode().unwrap();
    assert_eq!(stack.push_snapshot(Some(TOKEN), replay).await, 409);
    assert_eq!(stack.stat("infergate.control.accepted").await.unwrap_or(0), accepted);

    for _ in 0..10 {
        assert_eq!(stack.chat("m", 1).await.served_by(), Some(best.to_string().as_str()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_listener_is_bound_to_loopback_only() {
    let stack = Stack::start(StackSpec { start_agent: false, ..StackSpec::default() }).await;
    let listeners: serde_json::Value = stack
        .client()
        .get(format!("{}/listeners?format=json", stack.admin_url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let control = listeners["listener_statuses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "control")
        .expect("a control listener");
    assert_eq!(control["local_address"]["socket_address"]["address"], "127.0.0.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_reports_its_health_readiness_and_metrics() {
    let stack = Stack::start(StackSpec::default()).await;
    let get = |path: &str| {
        let url = format!("{}{path}", stack.agent_url);
        let client = stack.client().clone();
        async move { client.get(url).send().await.expect("the agent answers") }
    };
    assert_eq!(get("/healthz").await.status(), 200);
    stack
        .wait_until("the agent to be ready", Duration::from_secs(3), || async { get("/readyz").await.status() == 200 })
        .await;
    let metrics = get("/metrics").await.text().await.unwrap();
    for family in
        ["infergate_agent_snapshots_total", "infergate_agent_scrape_duration_seconds", "infergate_agent_snapshot_bytes"]
    {
        assert!(metrics.contains(family), "{family} missing from:\n{metrics}");
    }
    assert!(!metrics.contains(infergate_e2e::stack::TOKEN), "the token must never appear");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_never_appears_in_the_agents_logs_even_at_trace_level() {
    let mut stack = Stack::start(StackSpec { start_agent: false, ..StackSpec::default() }).await;
    let config = stack.path("infergate.yaml");
    let control = stack.control_url.clone();
    // A second, dead gateway makes the agent log push failures too.
    stack
        .start_agent_with(
            &[
                std::ffi::OsStr::new("-c"),
                config.as_os_str(),
                std::ffi::OsStr::new("--control"),
                std::ffi::OsStr::new(&control),
                std::ffi::OsStr::new("--control"),
                std::ffi::OsStr::new("http://127.0.0.1:9"),
            ],
            &[("RUST_LOG", "trace")],
        )
        .await;
    assert_eq!(stack.chat("m", 4).await.status, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = stack.agent_log();
    assert!(log.contains("push failed"), "the dead gateway's failure is logged:\n{log}");
    assert!(log.lines().count() > 20, "trace logging is on");
    assert!(!log.contains(infergate_e2e::stack::TOKEN), "the token leaked into the agent's log");
}
