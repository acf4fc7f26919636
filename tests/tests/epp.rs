//! `infergate-epp` behind real Envoy's ext_proc filter, fed by the real agent: routing
//! follows what the pods report, a conversation's next turn returns to its pod, a long
//! body is routed before it ends, a retry moves to the next ranked pod, and a dead
//! picker fails requests fast instead of sending them unrouted; two pickers keep
//! conversations on their pods, and one that stops under load loses no request.

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
    let ready = stack.client().get(format!("{}/readyz", stack.pickers[0].control_url)).send().await;
    assert_eq!(ready.map(|r| r.status().as_u16()).ok(), Some(200), "ready once a snapshot is in");

    // Routing follows the pinned metrics, and then their change.
    let pods = stack.fleet.pods.clone();
    for best in [pods[1], pods[3]] {
        stack.favour(best, &pods).await;
        stack.wait_for_favour(best, Duration::from_secs(3)).await;
        let count = stack.count_favoured(best, 40, 38).await;
        assert!(count.met, "short of 38/40:\n{}", count.report);
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
    stack.pickers.clear();
    let started = Instant::now();
    let reply = stack.chat("m", 1).await;
    assert!(reply.status >= 500, "{} {}", reply.status, reply.body);
    assert!(reply.served_by().is_none(), "an unrouted request reached a pod");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}

/// A conversation's prompt after `turns` turns, each extending the last one's prefix.
fn conversation(id: usize, turns: usize) -> String {
    let mut prompt = format!("You are assistant number {id}. ").repeat(40);
    for turn in 0..turns {
        prompt.push_str(&format!(" Question {turn} of conversation {id}: how does this work? Answer: it works."));
    }
    prompt
}

/// Every picker's decisions so far.
async fn decisions(stack: &Stack) -> Vec<u64> {
    let mut counts = Vec::new();
    for picker in &stack.pickers {
        counts.push(picker.metric(stack.client(), "infergate_epp_decisions_total").await.unwrap_or(0));
    }
    counts
}

/// Which picker decided between two readings of [`decisions`].
fn decided_by(before: &[u64], after: &[u64]) -> Option<usize> {
    let moved: Vec<usize> = (0..before.len()).filter(|&i| after.get(i) != before.get(i)).collect();
    (moved.len() == 1).then(|| moved[0])
}

/// Two pickers behind one Envoy: Envoy alternates streams between them, so consecutive
/// turns of a conversation are mostly decided by different pickers; the records each
/// relays through the agent keep every turn on its conversation's pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pickers_keep_each_conversation_on_its_pod_whichever_decides() {
    let stack = Stack::start(StackSpec { pickers: 2, pools: vec![("a", 4)], ..spec() }).await;
    stack
        .wait_until("both pickers to adopt a snapshot", Duration::from_secs(5), || async {
            for picker in &stack.pickers {
                let ready = stack.client().get(format!("{}/readyz", picker.control_url)).send().await;
                if !ready.is_ok_and(|r| r.status().is_success()) {
                    return false;
                }
            }
            true
        })
        .await;
    let (mut follow_ups, mut followed, mut crossed) = (0, 0, 0);
    let mut misses = Vec::new();
    for id in 0..10 {
        let mut home: Option<(String, usize)> = None;
        for turn in 0..3 {
            let before = decisions(&stack).await;
            let body = infergate_e2e::chat_body("m", &conversation(id, turn + 1), 4).to_string();
            let reply = stack.post("/v1/chat/completions", body, &[]).await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            let picker = decided_by(&before, &decisions(&stack).await).expect("one picker decided");
            let served_by = reply.served_by().unwrap_or_default().to_string();
            match &home {
                None => home = Some((served_by, picker)),
                Some((pod, first_picker)) => {
                    follow_ups += 1;
                    crossed += usize::from(picker != *first_picker);
                    if served_by == *pod {
                        followed += 1;
                    } else {
                        misses.push((
                            id,
                            turn,
                            served_by,
                            reply.header("x-sim-echo-x-infergate-decision").map(String::from),
                        ));
                    }
                }
            }
            // A reader's pause: longer than the two push intervals a record needs.
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
    }
    eprintln!("follow-ups on their pod: {followed} of {follow_ups}; decided by another picker: {crossed}");
    assert!(crossed * 3 >= follow_ups, "only {crossed} of {follow_ups} follow-ups reached the other picker");
    // By chance, with 4 idle pods, a follow-up would find its pod one time in four.
    assert!(followed * 100 >= follow_ups * 95, "{followed} of {follow_ups} on their pod; missed: {misses:?}");
    let relayed = stack.pickers[1].metric(stack.client(), "infergate_epp_peer_records_received_total").await;
    assert!(relayed.is_some_and(|n| n >= 5), "records relayed to picker 1: {relayed:?}");

    // The gRPC retry policy (its back-off at most 0.25 s) does not cut a stream that
    // lives longer: requests of 1.5 s are served, whichever picker holds their stream.
    for &pod in &stack.fleet.pods.clone() {
        stack.fault(pod, serde_json::json!({"added_latency_ms": 1_500})).await;
    }
    let slow = futures::future::join_all((0..4).map(|_| stack.chat("m", 1))).await;
    for reply in slow {
        assert_eq!(reply.status, 200, "a 1.5 s request: {}", reply.body);
    }
}

/// Sends requests from `clients` loops until `stop`; every reply's status, in order of
/// sending, with the time it was sent.
async fn load(stack: &Stack, clients: usize, stop: Instant) -> Vec<(Duration, u16, String)> {
    let started = Instant::now();
    let mut loops = Vec::new();
    for client in 0..clients {
        loops.push(async move {
            let mut replies = Vec::new();
            let mut n = 0;
            while Instant::now() < stop {
                let sent = started.elapsed();
                let body = infergate_e2e::chat_body("m", &conversation(client, n % 4), 8).to_string();
                let reply = stack.post("/v1/chat/completions", body, &[]).await;
                replies.push((sent, reply.status, reply.body.chars().take(160).collect()));
                n += 1;
            }
            replies
        });
    }
    futures::future::join_all(loops).await.into_iter().flatten().collect()
}

/// Three pickers under load. One stops as Kubernetes stops a pod (SIGTERM): it drains
/// (its health says so and Envoy sends it no new stream after its next check) and
/// serves its open streams to their end, so no client request fails. Another is then
/// killed outright (SIGKILL): the requests whose streams were open on it may fail
/// (Envoy cannot resend a body that has gone to a picker), and none sent later does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_picker_that_stops_under_load_loses_no_request_and_one_killed_loses_only_its_open_streams() {
    let mut stack = Stack::start(StackSpec { pickers: 3, pools: vec![("a", 4)], ..spec() }).await;
    for &pod in &stack.fleet.pods.clone() {
        stack.fault(pod, serde_json::json!({"added_latency_ms": 150})).await;
    }
    // Picker 2 stops gracefully 1 s into 4 s of load from 6 clients.
    let stop = Instant::now() + Duration::from_secs(4);
    let (replies, ()) = tokio::join!(load(&stack, 6, stop), async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        stack.pickers[2].terminate();
    });
    let failed: Vec<_> = replies.iter().filter(|(_, status, _)| *status != 200).collect();
    eprintln!("SIGTERM: {} requests, {} failed", replies.len(), failed.len());
    assert!(replies.len() >= 60, "only {} requests", replies.len());
    assert!(failed.is_empty(), "a draining picker failed requests: {failed:?}");
    assert!(stack.pickers[2].exited_cleanly(Duration::from_secs(10)).await, "the drained picker exits 0");

    // Picker 1 is killed outright 1 s into 4 s more: only requests whose stream was
    // open on it may fail, and from 1.5 s after the kill (a health check and a
    // margin) none does. Picker 0 serves on alone.
    let mut victim = stack.pickers.remove(1);
    let stop = Instant::now() + Duration::from_secs(4);
    let killed_at = Duration::from_secs(1);
    let (replies, ()) = tokio::join!(load(&stack, 6, stop), async {
        tokio::time::sleep(killed_at).await;
        victim.kill();
    });
    let failed: Vec<_> = replies.iter().filter(|(_, status, _)| *status != 200).collect();
    eprintln!("SIGKILL: {} requests, {} failed: {failed:?}", replies.len(), failed.len());
    let late: Vec<_> = failed.iter().filter(|(sent, _, _)| *sent > killed_at + Duration::from_millis(1_500)).collect();
    assert!(late.is_empty(), "requests sent well after the kill failed: {late:?}");
    assert!(failed.len() <= 6, "more failures than clients, so than open streams: {failed:?}");
}
