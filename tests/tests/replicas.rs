//! Active-active: three Envoy replicas, one agent, one fleet. Each replica's prefix
//! records and in-flight counts reach the others through the agent's pushes, so the
//! replicas route as one gateway.

use std::time::Duration;

use infergate_e2e::{Reply, Stack, StackSpec, chat_body};
use serde_json::json;

/// Time between a conversation's turns: a reader's pause, far longer than the two push
/// intervals (100 ms here) a record needs to reach every replica.
const THINK_TIME: Duration = Duration::from_millis(400);

fn three_replicas(pods: usize) -> StackSpec {
    StackSpec { pools: vec![("a", pods)], replicas: 3, ..StackSpec::default() }
}

/// A conversation's prompt after `turns` turns: a system prompt of its own, then the
/// turns so far, so that each turn extends the previous one's prefix.
fn conversation(id: usize, turns: usize) -> String {
    let mut prompt = format!("You are assistant number {id}. ").repeat(40);
    for turn in 0..turns {
        prompt.push_str(&format!(" Question {turn} of conversation {id}: how does this work? Answer: it works."));
    }
    prompt
}

/// Pins every pod as idle, whatever it runs, and makes each request take `latency_ms`.
async fn idle_but_slow(stack: &Stack, latency_ms: u64) {
    for &pod in &stack.fleet.pods {
        stack.pin(pod, 0.0, 0.0, 0.05).await;
        stack.fault(pod, json!({"added_latency_ms": latency_ms})).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// A counter of the agent's /metrics.
async fn agent_counter(stack: &Stack, name: &str) -> Option<f64> {
    let metrics = stack.client().get(format!("{}/metrics", stack.agent_url)).send().await;
    let metrics = metrics.expect("the agent answers").text().await.unwrap_or_default();
    metrics.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A one-token chat request with `prompt`, sent to one replica.
async fn send(stack: &Stack, gateway: &str, prompt: String) -> Reply {
    let body = chat_body("m", &prompt, 1).to_string();
    stack.post_at(gateway, "/v1/chat/completions", body, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_turn_finds_its_conversations_pod_on_whichever_replica_takes_it() {
    let stack = Stack::start(three_replicas(4)).await;
    let gateways = stack.gateway_urls();
    assert_eq!(gateways.len(), 3);
    let mut followed = 0;
    let mut follow_ups = 0;
    let mut misses = Vec::new();
    for id in 0..8 {
        let mut pod: Option<String> = None;
        for turn in 0..3 {
            // Consecutive turns go to different replicas.
            let gateway = &gateways[(id + turn) % gateways.len()];
            let body = chat_body("m", &conversation(id, turn + 1), 4).to_string();
            let reply = stack.post_at(gateway, "/v1/chat/completions", body, &[]).await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            let served_by = reply.served_by().map(String::from);
            // Conversation 0's next turns are replicas 2 and 3's first requests: they
            // follow only through the records relayed before their workers joined.
            if let Some(first) = &pod {
                follow_ups += 1;
                if served_by.as_ref() == Some(first) {
                    followed += 1;
                } else {
                    misses.push((id, turn, served_by.clone(), reply.header("x-infergate-decision").map(String::from)));
                }
            }
            pod = pod.or(served_by);
            tokio::time::sleep(THINK_TIME).await;
        }
    }
    // By chance, with 4 idle pods, a follow-up would find its pod one time in four.
    assert!(
        followed * 100 >= follow_ups * 95,
        "{followed} of {follow_ups} follow-ups on their pod; missed: {misses:?}"
    );
    let passed_on = agent_counter(&stack, "infergate_agent_replica_prefix_records_total").await;
    assert!(passed_on.is_some_and(|n| n >= 8.0), "records passed on: {passed_on:?}");
}

/// Between replica 1's requests: more than a load push interval (5 ms). Five sent at one
/// instant would stay on replica 1's own share of the pods, two to a pod: a replica
/// takes a burst for one that reached every replica (docs/replicas.md, step 9).
const BUSY_GAP: Duration = Duration::from_millis(20);

/// The pods report idle whatever they run and take 3 s per request: only the gateways'
/// own counts tell the busy pods from the free one. Replica 1 occupies five of the six
/// pods; `after` the first of them, replicas 2 and 3 each send one request, which must
/// both go to the free pod.
async fn the_others_find_the_free_pod(stack: &Stack, after: Duration) {
    let pods = stack.fleet.pods.clone();
    idle_but_slow(stack, 3_000).await;
    let gateways = stack.gateway_urls();
    let first = &gateways[0];
    let busy = futures::future::join_all((0..5u32).map(|i| async move {
        tokio::time::sleep(BUSY_GAP * i).await;
        send(stack, first, format!("busy {i}")).await
    }));
    let checks = async {
        tokio::time::sleep(after).await;
        tokio::join!(send(stack, &gateways[1], "second".into()), send(stack, &gateways[2], "third".into()))
    };
    let (busy, (second, third)) = tokio::join!(busy, checks);
    let mut busy_pods: Vec<String> = busy.iter().filter_map(|r| r.served_by().map(String::from)).collect();
    busy_pods.sort();
    busy_pods.dedup();
    assert_eq!(busy_pods.len(), 5, "replica 1 spread its requests: {busy_pods:?}");
    let free: Vec<String> = pods.iter().map(ToString::to_string).filter(|p| !busy_pods.contains(p)).collect();
    for reply in [&second, &third] {
        assert_eq!(reply.status, 200, "{}", reply.body);
        // Without replica 1's counts each would keep to its own share of the six pods,
        // which holds the free one for at most one of them.
        assert_eq!(
            reply.served_by().map(String::from),
            free.first().cloned(),
            "{:?}",
            reply.header("x-infergate-decision")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_counts_the_other_replicas_requests_in_flight() {
    // Without load pushes, 400 ms: replica 1's counts have reached the others with the
    // snapshots (scraped every 50 ms).
    let stack = Stack::start(StackSpec { load_exchange_ms: Some(0), ..three_replicas(6) }).await;
    the_others_find_the_free_pod(&stack, Duration::from_millis(400)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_arriving_together_at_different_replicas_start_on_different_pods() {
    let stack = Stack::start(three_replicas(6)).await;
    // Every pod reports idle and takes 300 ms per request: within a round the replicas
    // cannot see each other's requests (the next exchange is up to 200 ms away), so
    // only their shares of the pods keep them apart.
    idle_but_slow(&stack, 300).await;
    let gateways = stack.gateway_urls();
    for round in 0..5 {
        let replies = futures::future::join_all(
            gateways
                .iter()
                .enumerate()
                .map(|(i, gateway)| send(&stack, gateway, format!("round {round}, new topic {i}"))),
        )
        .await;
        let mut served: Vec<String> = replies
            .iter()
            .map(|reply| {
                assert_eq!(reply.status, 200, "{}", reply.body);
                reply.served_by().map(String::from).unwrap_or_default()
            })
            .collect();
        served.sort();
        served.dedup();
        // By chance, three independent picks among six idle pods are all different
        // 56% of the time: five rounds in a row, 5%.
        assert_eq!(
            served.len(),
            3,
            "round {round}: {:?}",
            replies.iter().map(|r| r.header("x-infergate-decision")).collect::<Vec<_>>()
        );
        // Let the requests finish and every replica's count of them clear.
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_sees_the_others_requests_within_milliseconds_not_a_scrape() {
    // As above, but scraped once a second and checked 150 ms later: the snapshots cannot
    // have carried replica 1's counts yet (their digests reach the others one to two
    // scrapes later); the load pushes between snapshots, every 5 ms, have.
    let stack = Stack::start(StackSpec { scrape_interval_ms: 1_000, ..three_replicas(6) }).await;
    // A snapshot with the pins first.
    idle_but_slow(&stack, 3_000).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    the_others_find_the_free_pod(&stack, Duration::from_millis(150)).await;
    let pushes = agent_counter(&stack, "infergate_agent_load_pushes_total").await;
    // About 200 a second per replica for the test's few seconds.
    assert!(pushes.is_some_and(|n| n >= 300.0), "load pushes answered: {pushes:?}");
}
