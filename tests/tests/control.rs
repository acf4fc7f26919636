//! The control listener admits only authenticated, valid snapshots.

use std::time::Duration;

use infergate_e2e::{Stack, StackSpec};

async fn push(stack: &Stack, token: Option<&str>, body: Vec<u8>) -> u16 {
    let mut request = stack
        .client()
        .post(format!("{}/v1/snapshot", stack.control_url))
        .body(body);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    request
        .send()
        .await
        .expect("the control listener answers")
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pushes_are_refused_and_routing_keeps_the_last_good_snapshot() {
    let mut stack = Stack::start(StackSpec::default()).await;
    let pods = stack.fleet.pods.clone();
    let best = pods[2];
    stack.favour(best, &pods).await;
    stack
        .wait_until(
            "routing to follow the pinned metrics",
            Duration::from_secs(3),
            || async { stack.chat("m", 1).await.served_by() == Some(&best.to_string()) },
        )
        .await;
    // Stop the agent so that only the pushes below reach the filter.
    stack.kill_agent();
    let accepted = stack.stat("infergate.control.accepted").await.unwrap_or(0);

    assert_eq!(push(&stack, None, b"whatever".to_vec()).await, 401);
    assert_eq!(
        push(&stack, Some("wrong-token"), b"whatever".to_vec()).await,
        401
    );
    assert_eq!(
        push(
            &stack,
            Some(infergate_e2e::stack::TOKEN),
            b"\xc1 garbage".to_vec()
        )
        .await,
        400
    );
    assert_eq!(
        push(&stack, Some(infergate_e2e::stack::TOKEN), Vec::new()).await,
        400
    );
    assert_eq!(
        stack.stat("infergate.control.accepted").await.unwrap_or(0),
        accepted
    );
    assert!(
        stack
            .stat("infergate.control.unauthorized")
            .await
            .unwrap_or(0)
            >= 2
    );
    assert!(stack.stat("infergate.control.invalid").await.unwrap_or(0) >= 2);

    for _ in 0..10 {
        assert_eq!(
            stack.chat("m", 1).await.served_by(),
            Some(best.to_string().as_str())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_listener_is_bound_to_loopback_only() {
    let stack = Stack::start(StackSpec {
        start_agent: false,
        ..StackSpec::default()
    })
    .await;
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
    assert_eq!(
        control["local_address"]["socket_address"]["address"],
        "127.0.0.1"
    );
}
