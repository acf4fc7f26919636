//! The scheduler in real Envoy with two workers: prefix affinity across workers, no
//! hot-spot under a burst, and LoRA residency.

use std::collections::HashMap;
use std::time::Duration;

use infergate_core::config::RoutingSettings;
use infergate_e2e::{ModelSpec, Reply, Stack, StackSpec};
use infergate_model_sim::engine::EngineProfile;
use serde_json::{Value, json};

/// A client with one keep-alive connection: Envoy's exact balance puts each on its
/// own worker.
fn single_connection_client() -> reqwest::Client {
    reqwest::Client::builder().pool_max_idle_per_host(1).build().unwrap()
}

async fn post(client: &reqwest::Client, stack: &Stack, body: &Value) -> Reply {
    let response = client.post(format!("{}/v1/chat/completions", stack.gateway_url)).json(body).send().await.unwrap();
    infergate_e2e::client::read_reply(response).await
}

async fn worker_connections(stack: &Stack) -> Vec<u64> {
    let text = stack
        .client()
        .get(format!("{}/stats?filter=worker_.\\.downstream_cx_total", stack.admin_url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(&format!("listener.{}", stack.config.gateway.listen).replace(':', "_")))
        .filter_map(|l| l.rsplit_once(": ").and_then(|(_, v)| v.trim().parse().ok()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversations_next_turn_finds_its_prefix_on_the_other_worker() {
    let stack = Stack::start(StackSpec::default()).await;
    let clients = [single_connection_client(), single_connection_client()];
    let mut followed = 0;
    let mut turns = 0;
    for conversation in 0..20 {
        let system = format!("Conversation {conversation}. You answer questions about GPUs in detail. ").repeat(30);
        let mut messages = vec![json!({"role": "system", "content": system})];
        let mut last_pod: Option<String> = None;
        for turn in 0..11 {
            messages
                .push(json!({"role": "user", "content": format!("question {turn} of conversation {conversation}")}));
            // Every third turn streams: its prefix is recorded at the first chunk.
            let body = json!({"model": "m", "messages": messages, "max_tokens": 2, "stream": turn % 3 == 0});
            // Alternate connections, hence workers, between consecutive turns.
            let reply = post(&clients[turn % 2], &stack, &body).await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            let pod = reply.served_by().unwrap_or_default().to_string();
            if let Some(previous) = &last_pod {
                turns += 1;
                if *previous == pod {
                    followed += 1;
                }
            }
            messages.push(json!({"role": "assistant", "content": "tok tok "}));
            last_pod = Some(pod);
        }
    }
    let per_worker = worker_connections(&stack).await;
    assert!(per_worker.len() == 2 && per_worker.iter().all(|&n| n >= 1), "both workers served: {per_worker:?}");
    eprintln!("{followed}/{turns} next turns landed on the pod holding the conversation");
    assert!(followed * 100 >= turns * 90, "only {followed}/{turns} next turns followed their prefix");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_identical_requests_spreads_over_the_pool() {
    let spec = StackSpec {
        pools: vec![("a", 8)],
        // A slow prefill: no pod answers (and so owns the prefix) during the burst.
        profile: EngineProfile { prefill_tokens_per_s: 2_000.0, ..EngineProfile::TINY },
        ..StackSpec::default()
    };
    let stack = Stack::start(spec).await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "the same question ".repeat(40)}], "max_tokens": 1});
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let client = reqwest::Client::new();
            let url = format!("{}/v1/chat/completions", stack.gateway_url);
            let body = body.clone();
            tokio::spawn(async move {
                infergate_e2e::client::read_reply(client.post(url).json(&body).send().await.unwrap()).await
            })
        })
        .collect();
    let mut per_pod: HashMap<String, usize> = HashMap::new();
    for task in tasks {
        let reply = task.await.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        *per_pod.entry(reply.served_by().unwrap_or_default().to_string()).or_default() += 1;
    }
    eprintln!("burst of 64 sent and answered in {:?}: {per_pod:?}", started.elapsed());
    assert_eq!(per_pod.len(), 8, "{per_pod:?}");
    assert!(per_pod.values().all(|&n| n <= 64 / 8 + 2), "a pod got more than its fair share + 2: {per_pod:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lora_request_lands_where_its_adapter_is_resident() {
    let spec = StackSpec {
        models: vec![ModelSpec::base("m", "a"), ModelSpec::lora("sql-lora", "a", "sql-lora")],
        ..StackSpec::default()
    };
    let stack = Stack::start(spec).await;
    let pods = stack.fleet.pods.clone();
    let pin =
        |running: &[&str]| json!({"waiting": 0, "running": 1, "kv_cache_usage": 0.2, "running_lora_adapters": running});
    // TINY pods have 2 LoRA slots: pods 0 and 3 are full, 1 has room, 2 runs the adapter.
    stack.pin_json(pods[0], pin(&["a", "b"])).await;
    stack.pin_json(pods[1], pin(&[])).await;
    stack.pin_json(pods[2], pin(&["sql-lora"])).await;
    stack.pin_json(pods[3], pin(&["c", "d"])).await;
    sql_lora_stays_on(&stack, &pods[2].to_string(), &["adapter=Running"], 20).await;
    // With the resident pod's KV cache full (no room for even this prompt: it would
    // wait for a running request to finish), the pod with a free slot beats it and the
    // ones whose slots are all held.
    stack
        .pin_json(
            pods[2],
            json!({"waiting": 0, "running": 1, "kv_cache_usage": 1.0, "running_lora_adapters": ["sql-lora"]}),
        )
        .await;
    let free = pods[1].to_string();
    stack
        .wait_until("routing to move to the free slot", Duration::from_secs(3), || async {
            stack.chat("sql-lora", 1).await.served_by() == Some(free.as_str())
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_copy_of_an_adapter_is_not_made_where_slots_are_scarce() {
    // Eight adapters configured for 4 TINY pods of 2 slots: a second copy of one leaves
    // another with no slot. "sql-lora" runs on pod 2, whose KV cache is full with 8
    // running (a wait of about 640 ms); pod 1 has a free slot. Loading "sql-lora" there
    // would be cheaper for this request, but is priced as a duplicate.
    let mut models = vec![ModelSpec::base("m", "a"), ModelSpec::lora("sql-lora", "a", "sql-lora")];
    models.extend(["a", "b", "c", "d", "e", "f", "g"].map(|adapter| ModelSpec::lora(adapter, "a", adapter)));
    let stack = Stack::start(StackSpec { models, ..StackSpec::default() }).await;
    let pods = stack.fleet.pods.clone();
    let pin = |running: f64, kv: f64, adapters: &[&str]| json!({"waiting": 0, "running": running, "kv_cache_usage": kv, "running_lora_adapters": adapters});
    stack.pin_json(pods[0], pin(1.0, 0.2, &["a", "b"])).await;
    stack.pin_json(pods[1], pin(1.0, 0.2, &["e"])).await;
    stack.pin_json(pods[2], pin(8.0, 1.0, &["sql-lora"])).await;
    stack.pin_json(pods[3], pin(1.0, 0.2, &["c", "d"])).await;
    sql_lora_stays_on(&stack, &pods[2].to_string(), &["adapter=Running", "adapter=Duplicate"], 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adapter_just_sent_to_a_pods_last_free_slot_claims_it() {
    // Pod 1 is idle with one free slot; pod 2 has one too, behind a queue of 2; pods 3
    // and 4 have none. "a" goes to pod 1. "b", sent right after on the same worker and
    // the same snapshot (which cannot list "a" there yet), finds that slot claimed and
    // goes to pod 2. Scrapes every second, so that a pair sent just after a snapshot
    // falls within it; a pair that straddles two is sent again. All requests go over
    // one keep-alive connection, so one worker routes them.
    let models = vec![ModelSpec::base("m", "a"), ModelSpec::lora("a", "a", "a"), ModelSpec::lora("b", "a", "b")];
    let routing = RoutingSettings { signal_max_age_ms: 10_000, adapter_max_age_ms: 10_000, ..Default::default() };
    let stack = Stack::start(StackSpec { models, routing, scrape_interval_ms: 1_000, ..StackSpec::default() }).await;
    let pods: Vec<String> = stack.fleet.pods.iter().map(ToString::to_string).collect();
    let pin = |waiting: f64, running: f64, kv: f64, adapters: &[&str]| json!({"waiting": waiting, "running": running, "kv_cache_usage": kv, "running_lora_adapters": adapters});
    stack.pin_json(stack.fleet.pods[0], pin(0.0, 1.0, 0.2, &["x"])).await;
    stack.pin_json(stack.fleet.pods[1], pin(2.0, 4.0, 0.4, &["x"])).await;
    stack.pin_json(stack.fleet.pods[2], pin(0.0, 6.0, 0.6, &["x", "y"])).await;
    stack.pin_json(stack.fleet.pods[3], pin(0.0, 6.0, 0.6, &["x", "y"])).await;
    let client = single_connection_client();
    let send = |model: &'static str| {
        let body = json!({"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "Hello there"}]});
        let client = client.clone();
        let stack = &stack;
        async move { post(&client, stack, &body).await }
    };
    let decision = |reply: &Reply| reply.header("x-infergate-decision").unwrap_or_default().to_string();
    let age = |decision: &str| -> u64 {
        let age = decision.split("; ").find_map(|part| part.strip_prefix("snapshot_age_ms="));
        age.and_then(|a| a.parse().ok()).unwrap_or_else(|| panic!("no snapshot age in {decision}"))
    };
    // A pod's entry in a decision ("chosen=…" or "runner_up=…"), if it is there.
    let entry = |decision: &str, pod: &str| -> String {
        decision.split("; ").find(|part| part.contains(&format!("={pod} score="))).unwrap_or_default().to_string()
    };
    stack
        .wait_until("the pinned metrics to reach the router", Duration::from_secs(5), || async {
            entry(&decision(&send("m").await), &pods[0]).contains("waiting=0 running=1 kv=0.20")
        })
        .await;
    for _ in 0..5 {
        // Wait for the next snapshot (its age drops), so that the pair has most of an
        // interval and nothing sent before it counts.
        let mut last = age(&decision(&send("m").await));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            assert!(tokio::time::Instant::now() < deadline, "no new snapshot within 3 s at a 1 s scrape interval");
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = age(&decision(&send("m").await));
            if now < last {
                break;
            }
            last = now;
        }
        // Leave the snapshot some age, so that the check below can tell it from a newer one.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let sent = tokio::time::Instant::now();
        let (first, second) = (send("a").await, send("b").await);
        let (first_decision, second_decision) = (decision(&first), decision(&second));
        // The second decision's snapshot was made before the first was sent if its age
        // exceeds the whole pair's time; otherwise a snapshot may have come between the
        // two and dropped the load (comparing the two ages misses one that came more
        // than their difference after the first, as a loaded machine showed).
        if u128::from(age(&second_decision)) <= sent.elapsed().as_millis() {
            continue;
        }
        assert_eq!(first.served_by(), Some(pods[0].as_str()), "{first_decision}");
        assert!(entry(&first_decision, &pods[0]).ends_with("adapter=FreeSlot"), "{first_decision}");
        assert_eq!(second.served_by(), Some(pods[1].as_str()), "{second_decision}");
        assert!(entry(&second_decision, &pods[1]).ends_with("adapter=FreeSlot"), "{second_decision}");
        assert!(entry(&second_decision, &pods[0]).ends_with("adapter=Blocked"), "{second_decision}");
        return;
    }
    panic!("five pairs in a row may have straddled two snapshots (each took longer than its snapshot's age)");
}

/// Waits until a "sql-lora" decision shows every one of `states` (the adapter lists
/// reached the router), then checks that `times` requests in a row go to `pod` with
/// the same states in their decisions.
async fn sql_lora_stays_on(stack: &Stack, pod: &str, states: &[&str], times: usize) {
    let shows_all = |decision: Option<&str>| decision.is_some_and(|d| states.iter().all(|s| d.contains(s)));
    stack
        .wait_until("the adapter lists to reach the router", Duration::from_secs(3), || async {
            shows_all(stack.chat("sql-lora", 1).await.header("x-infergate-decision"))
        })
        .await;
    for _ in 0..times {
        let reply = stack.chat("sql-lora", 1).await;
        let decision = reply.header("x-infergate-decision");
        assert_eq!(reply.served_by(), Some(pod), "{decision:?}");
        assert!(shows_all(decision), "{decision:?}");
    }
}
