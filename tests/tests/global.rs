//! Tier 2 end to end: a global Envoy with the filter in its `global` role in front of
//! two clusters, each a tier-1 stack (Envoy, agent, simulated pods) whose agent sends
//! it summaries.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use infergate_e2e::global_router::{ClusterSpec, GlobalRouter};
use infergate_e2e::{Reply, Stack, StackSpec};

const SUMMARY_MAX_AGE_MS: u64 = 500;

struct TwoRegions {
    east: Stack,
    west: Stack,
    global: GlobalRouter,
}

/// East is local and cheaper, west remote and dearer.
async fn two_regions() -> TwoRegions {
    let spec = || StackSpec { start_agent: false, ..StackSpec::default() };
    let (mut east, mut west) = (Stack::start(spec()).await, Stack::start(spec()).await);
    let clusters = [
        (ClusterSpec { name: "east", region: "us-east", cost_per_million_tokens: 0.4 }, east.config.gateway.listen),
        (ClusterSpec { name: "west", region: "us-west", cost_per_million_tokens: 0.6 }, west.config.gateway.listen),
    ];
    let global = GlobalRouter::start("us-east", &clusters, SUMMARY_MAX_AGE_MS).await;
    global.attach(&mut east, "east").await;
    global.attach(&mut west, "west").await;
    TwoRegions { east, west, global }
}

impl TwoRegions {
    fn cluster_of(&self, reply: &Reply) -> &'static str {
        let pod = reply.served_by().unwrap_or_default();
        if self.east.fleet.pods.iter().any(|p| p.to_string() == pod) {
            "east"
        } else if self.west.fleet.pods.iter().any(|p| p.to_string() == pod) {
            "west"
        } else {
            "none"
        }
    }

    async fn spread(&self, requests: usize, class: Option<&str>) -> HashMap<&'static str, usize> {
        let mut served = HashMap::new();
        for _ in 0..requests {
            let reply = self.global.chat("m", class).await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            *served.entry(self.cluster_of(&reply)).or_insert(0) += 1;
        }
        served
    }

    async fn wait_for(&self, what: &str, class: Option<&str>, cluster: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let reply = self.global.chat("m", class).await;
            if GlobalRouter::first_cluster(&reply).as_deref() == Some(cluster) && self.cluster_of(&reply) == cluster {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}; last: {:?}", reply.headers);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cheapest_cluster_meeting_each_class_target_serves_and_slow_or_silent_clusters_lose_traffic() {
    let regions = two_regions().await;
    regions.wait_for("summaries from both clusters", None, "east").await;
    let latency = regions.spread(20, None).await;
    assert_eq!(latency.get("east"), Some(&20), "the cheaper cluster serves: {latency:?}");

    // East's pods report deep queues: it misses the latency target, not the batch one.
    for &pod in &regions.east.fleet.pods {
        regions.east.pin(pod, 200.0, 64.0, 0.95).await;
    }
    regions.wait_for("latency traffic to leave the slow cluster", None, "west").await;
    let spilled = regions.spread(20, None).await;
    assert_eq!(spilled.get("west"), Some(&20), "latency requests avoid the slow cluster: {spilled:?}");
    let reply = regions.global.chat("m", Some("batch")).await;
    let decision = reply.header("x-infergate-decision").unwrap_or_default().to_string();
    assert_eq!(GlobalRouter::first_cluster(&reply).as_deref(), Some("east"), "batch still fits east: {decision}");

    // Recovered, it gets its traffic back.
    for &pod in &regions.east.fleet.pods {
        regions.east.unpin(pod).await;
    }
    regions.wait_for("latency traffic to return", None, "east").await;

    // East's agent dies: its summary goes stale, and its traffic moves west once the
    // summary is two of the agent's intervals (50 ms each) old.
    let mut regions = regions;
    regions.east.kill_agent();
    let silenced = Instant::now();
    regions.wait_for("the silent cluster to be drained", None, "west").await;
    let drained_after = silenced.elapsed();
    eprintln!("stale cluster drained {drained_after:?} after its agent stopped");
    let reply = regions.global.chat("m", None).await;
    let decision = reply.header("x-infergate-decision").unwrap_or_default().to_string();
    assert!(decision.contains("east(stale)"), "east should be ranked last as stale: {decision}");
    assert!(drained_after < Duration::from_millis(4 * SUMMARY_MAX_AGE_MS), "drained only after {drained_after:?}");

    let error = regions.global.chat("no-such-model", None).await;
    assert_eq!((error.status, error.error_code()), (404, "model_not_found".to_string()), "{}", error.body);
    let bad_class = regions.global.chat("m", Some("urgent")).await;
    assert_eq!((bad_class.status, bad_class.error_code()), (400, "invalid_class".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_clusters_gateway_loses_no_request_and_drains_it_at_its_next_summary() {
    let mut regions = two_regions().await;
    regions.wait_for("summaries from both clusters", None, "east").await;

    let load = {
        let url = regions.global.url.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut statuses = Vec::new();
            for _ in 0..8 {
                let futures = (0..16).map(|_| {
                    client
                        .post(format!("{url}/v1/chat/completions"))
                        .json(&infergate_e2e::chat_body("m", "hello", 1))
                        .send()
                });
                for result in futures::future::join_all(futures).await {
                    statuses.push(result.map(|r| r.status().as_u16()).unwrap_or(0));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            statuses
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    regions.east.kill_envoy();
    let killed = Instant::now();
    // East's agent now fails to push to its own gateway and says so in its summary.
    regions.wait_for("the dead cluster to be drained", None, "west").await;
    let drained_after = killed.elapsed();
    let statuses = load.await.unwrap();
    let failed: Vec<&u16> = statuses.iter().filter(|&&s| s != 200).collect();
    assert!(failed.is_empty(), "{} of {} requests failed across the kill: {failed:?}", failed.len(), statuses.len());
    eprintln!("drained {drained_after:?} after the kill; {} requests, none failed", statuses.len());
    // The agent reports the dead gateway in its next summary, one interval later.
    assert!(drained_after < Duration::from_millis(SUMMARY_MAX_AGE_MS), "drained only after {drained_after:?}");
    let after = regions.spread(20, None).await;
    assert_eq!(after.get("west"), Some(&20), "{after:?}");
}

/// East's predicted TTFT in a decision header, if east was ranked ready.
fn east_ttft_ms(reply: &Reply) -> Option<u64> {
    let decision = reply.header("x-infergate-decision")?;
    decision.split("east(ttft=").nth(1)?.split("ms").next()?.parse().ok()
}

/// Requests the global router sent a cluster since its summary wait behind each other,
/// whichever Envoy worker sent them: a burst spread over the workers must raise the
/// cluster's predicted TTFT with every request, not with each worker's share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_both_workers_counts_in_full_in_the_clusters_backlog() {
    // Summaries every 5 s, fresh for two intervals: the agents stop after the first, so
    // that only the backlog moves the prediction during the burst.
    let spec = || StackSpec { start_agent: false, scrape_interval_ms: 5_000, ..StackSpec::default() };
    let (mut east, mut west) = (Stack::start(spec()).await, Stack::start(spec()).await);
    let clusters = [
        (ClusterSpec { name: "east", region: "us-east", cost_per_million_tokens: 0.4 }, east.config.gateway.listen),
        (ClusterSpec { name: "west", region: "us-west", cost_per_million_tokens: 0.6 }, west.config.gateway.listen),
    ];
    let global = GlobalRouter::start("us-east", &clusters, 20_000).await;
    global.attach(&mut east, "east").await;
    global.attach(&mut west, "west").await;
    let regions = TwoRegions { east, west, global };
    regions.wait_for("summaries from both clusters", None, "east").await;
    let mut regions = regions;
    regions.east.kill_agent();
    regions.west.kill_agent();

    // Each request on its own connection, so both workers take some; each takes ~1 s
    // to answer (400 tokens), so all are in the backlog when the last is routed.
    let mut burst = Vec::new();
    for _ in 0..6 {
        let url = format!("{}/v1/chat/completions", regions.global.url);
        burst.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let body = infergate_e2e::chat_body("m", "hello", 400);
            infergate_e2e::client::read_reply(client.post(url).json(&body).send().await.unwrap()).await
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut predicted = Vec::new();
    for request in burst {
        let reply = request.await.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        if GlobalRouter::first_cluster(&reply).as_deref() == Some("east") {
            predicted.push(east_ttft_ms(&reply).expect("east ranked ready"));
        }
    }
    eprintln!("east's predicted TTFT as the burst was routed: {predicted:?} ms");
    assert!(predicted.len() >= 4, "the burst left the cheaper cluster: {predicted:?}");
    assert!(predicted.windows(2).all(|w| w[0] < w[1]), "a request did not see the ones before it: {predicted:?}");
}
