//! `infergate-epp` behind real Envoy's ext_proc filter, fed by the real agent: routing
//! follows what the pods report, a conversation's next turn returns to its pod, a long
//! body is routed before it ends, a retry moves to the next ranked pod, and a dead
//! picker fails requests fast instead of sending them unrouted.

use std::time::{Duration, Instant};

use infergate_e2e::upload::Upload;
use infergate_e2e::{Stack, StackSpec};

fn spec() -> StackSpec {
    let mut spec = StackSpec { ext_proc: true, ..StackSpec::default() };
    // Hashing reads the first 8 KiB, so that a body routed early fits the simulated
    // engine's context.
    spec.routing.prefix.max_blocks = 128;
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_picker_routes_on_the_agents_snapshots_through_ext_proc() {
    let stack = Stack::start(spec()).await;
    let ready = stack.client().get(format!("{}/readyz", stack.picker.as_ref().unwrap().control_url)).send().await;
    assert_eq!(ready.map(|r| r.status().as_u16()).ok(), Some(200), "ready once a snapshot is in");

    // Routing follows the pinned metrics, and then their change.
    let pods = stack.fleet.pods.clone();
    for best in [pods[1], pods[3]] {
        stack.favour(best, &pods).await;
        stack.wait_for_favour(best, Duration::from_secs(3)).await;
        // A second round only if the first falls short (see `infergate_e2e::favoured`):
        // the strays were seen behind the native picker too.
        let count = stack.count_favoured(best, 40, 38).await;
        assert!(count.met, "short of 38/40 in both rounds:\n{}", count.report);
    }
    for &pod in &pods {
        stack.unpin(pod).await;
    }

    // The decision names the pool and ranks the pods; the pod saw the routing headers.
    let reply = stack.chat("m", 1).await;
    let ranked = reply.header("x-sim-echo-x-gateway-destination-endpoint").unwrap_or_default().to_string();
    assert_eq!(ranked.split(',').next(), reply.served_by(), "served by the first ranked pod: {ranked}");
    assert_eq!(reply.header("x-sim-echo-x-gateway-model-name"), Some("m"));

    // A conversation's next turns return to the pod that holds its prefix.
    let opening = "You are a careful assistant. ".repeat(60);
    let turn = |n: usize| {
        serde_json::json!({"model": "m", "max_tokens": 1, "messages": [
            {"role": "system", "content": opening}, {"role": "user", "content": format!("question {n}")}]})
        .to_string()
    };
    let first = stack.post("/v1/chat/completions", turn(0), &[]).await;
    let home = first.served_by().unwrap_or_default().to_string();
    for n in 1..6 {
        let next = stack.post("/v1/chat/completions", turn(n), &[]).await;
        assert_eq!(next.served_by(), Some(home.as_str()), "turn {n}");
    }

    // A long body naming its model first is routed while the client still sends it.
    let prompt = "early ".repeat(28 * 1024 / 6);
    let body = format!(r#"{{"model":"m","max_tokens":1,"messages":[{{"role":"user","content":"{prompt}"}}]}}"#);
    let upload = Upload::start(stack.config.gateway.listen, body.as_bytes(), 14 * 1024).await;
    stack
        .wait_until("the picker to route before the body ends", Duration::from_secs(5), || async {
            stack.picker_metric("infergate_epp_routed_early_total").await.unwrap_or(0) >= 1
        })
        .await;
    let (status, answer) = upload.finish().await;
    assert_eq!(status, 200, "{answer}");

    // Found invalid after the decision (a second `model` in the unsent part): the
    // picker's immediate 400 reaches the client, and the pod never answers.
    let twice =
        format!(r#"{{"model":"m","max_tokens":1,"messages":[{{"role":"user","content":"{prompt}"}}],"model":"x"}}"#);
    let upload = Upload::start(stack.config.gateway.listen, twice.as_bytes(), 14 * 1024).await;
    stack
        .wait_until("the second early decision", Duration::from_secs(5), || async {
            stack.picker_metric("infergate_epp_routed_early_total").await.unwrap_or(0) >= 2
        })
        .await;
    let (status, answer) = upload.finish().await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("the key 'model' twice"), "{answer}");
    assert!(!answer.contains("x-infergate-served-by"), "a pod answered: {answer}");
    assert_eq!(stack.picker_metric("infergate_epp_early_refused_total").await, Some(1));
    assert_eq!(stack.chat("m", 1).await.status, 200, "the gateway still serves");
    // Envoy closes each ext_proc stream once its request is over.
    stack
        .wait_until("every ext_proc stream to close", Duration::from_secs(3), || async {
            stack.picker_metric("infergate_epp_streams_open").await == Some(0)
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_refuses_is_retried_on_the_next_ranked_one_and_a_dead_picker_fails_fast() {
    let mut stack = Stack::start(spec()).await;
    let pods = stack.fleet.pods.clone();
    stack.favour(pods[0], &pods).await;
    stack
        .wait_until("routing to favour pod 0", Duration::from_secs(3), || async {
            stack.chat("m", 1).await.served_by() == Some(&pods[0].to_string())
        })
        .await;
    // The favoured pod answers every request with a 503: Envoy retries on the
    // picker's second choice.
    stack.fault(pods[0], serde_json::json!({"error_rate": 1.0, "error_status": 503})).await;
    for _ in 0..5 {
        let reply = stack.chat("m", 1).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_ne!(reply.served_by(), Some(pods[0].to_string().as_str()));
    }

    // No picker: Envoy answers at once (failure_mode_allow is off), never unrouted.
    drop(stack.picker.take());
    let started = Instant::now();
    let reply = stack.chat("m", 1).await;
    assert!(reply.status >= 500, "{} {}", reply.status, reply.body);
    assert!(reply.served_by().is_none(), "an unrouted request reached a pod");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}
