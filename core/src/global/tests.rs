use super::*;
use crate::config::GatewaySettings;

fn cluster(name: &str, region: &str, port: u16, cost: f64) -> ClusterConfig {
    ClusterConfig {
        name: name.into(),
        region: region.into(),
        gateway: format!("127.0.0.1:{port}").parse().unwrap(),
        cost_per_million_tokens: cost,
    }
}

fn config() -> GlobalRouterConfig {
    GlobalRouterConfig {
        version: 1,
        gateway: GatewaySettings::default(),
        global: GlobalSettings {
            local_region: "east".into(),
            summary_max_age_ms: 2_000,
            default_class: RequestClass::Latency,
            targets: ClassTargets { latency_ttft_ms: 500.0, batch_ttft_ms: 30_000.0 },
            cross_region_rtt_ms: 60.0,
        },
        clusters: vec![
            cluster("east-a", "east", 9001, 4.0),
            cluster("east-b", "east", 9002, 2.0),
            cluster("west", "west", 9003, 1.0),
        ],
        rate_limits: None,
        identity: Default::default(),
    }
}

fn summary(cluster: &str, at_ms: u64, ttft_ms: f64) -> ClusterSummary {
    ClusterSummary {
        version: SUMMARY_VERSION,
        cluster: cluster.into(),
        sequence: 1,
        created_at_ms: at_ms,
        interval_ms: 0,
        gateway_healthy: true,
        models: vec![ModelSummary {
            model: "m".into(),
            ready_pods: 4,
            waiting: 0.0,
            running: 1.0,
            kv_cache_usage: 0.1,
            predicted_ttft_ms: ttft_ms,
            prefill_ms: 40.0,
        }],
    }
}

fn names(decision: &GlobalDecision) -> Vec<&str> {
    decision.ranked.iter().map(|c| c.cluster.as_str()).collect()
}

const NOW: u64 = 1_000_000;

#[test]
fn the_cheapest_cluster_meeting_the_target_comes_first_and_the_local_region_breaks_ties() {
    let summaries = [summary("east-a", NOW, 100.0), summary("east-b", NOW, 200.0), summary("west", NOW, 50.0)];
    let refs: Vec<Option<&ClusterSummary>> = summaries.iter().map(Some).collect();
    let decision = rank_clusters(&config(), &refs, &[], "m", RequestClass::Latency, NOW).unwrap();
    assert_eq!(names(&decision), ["west", "east-b", "east-a"]);
    assert_eq!(decision.endpoint_header(), "127.0.0.1:9003,127.0.0.1:9002,127.0.0.1:9001");
    // West pays the round trip: 50 + 60 ms.
    assert_eq!(decision.ranked[0].state, ClusterState::Ready { predicted_ttft_ms: 110.0 });

    let mut equal = config();
    equal.clusters[2].cost_per_million_tokens = 2.0;
    let decision = rank_clusters(&equal, &refs, &[], "m", RequestClass::Latency, NOW).unwrap();
    assert_eq!(names(&decision), ["east-b", "west", "east-a"], "equal cost: the local cluster first");
}

#[test]
fn the_round_trip_can_make_a_remote_cluster_miss_the_latency_target_but_not_the_batch_one() {
    let summaries = [summary("east-a", NOW, 300.0), summary("east-b", NOW, 400.0), summary("west", NOW, 460.0)];
    let refs: Vec<Option<&ClusterSummary>> = summaries.iter().map(Some).collect();
    // 460 + 60 > 500: west misses the latency target, and the dearer local clusters win.
    let latency = rank_clusters(&config(), &refs, &[], "m", RequestClass::Latency, NOW).unwrap();
    assert_eq!(names(&latency), ["east-b", "east-a", "west"]);
    let batch = rank_clusters(&config(), &refs, &[], "m", RequestClass::Batch, NOW).unwrap();
    assert_eq!(names(&batch), ["west", "east-b", "east-a"]);
}

#[test]
fn a_burst_moves_latency_traffic_to_clusters_that_still_meet_the_target() {
    let summaries = [summary("east-a", NOW, 2_000.0), summary("east-b", NOW, 900.0), summary("west", NOW, 120.0)];
    let refs: Vec<Option<&ClusterSummary>> = summaries.iter().map(Some).collect();
    let decision = rank_clusters(&config(), &refs, &[], "m", RequestClass::Latency, NOW).unwrap();
    assert_eq!(names(&decision), ["west", "east-b", "east-a"]);
    // When none meets it, the soonest first.
    let summaries = [summary("east-a", NOW, 2_000.0), summary("east-b", NOW, 900.0), summary("west", NOW, 950.0)];
    let refs: Vec<Option<&ClusterSummary>> = summaries.iter().map(Some).collect();
    let decision = rank_clusters(&config(), &refs, &[], "m", RequestClass::Latency, NOW).unwrap();
    assert_eq!(names(&decision), ["east-b", "west", "east-a"]);
}

#[test]
fn requests_sent_since_the_summary_count_against_a_cluster_until_the_next() {
    let summaries = [summary("east-a", NOW, 400.0), summary("east-b", NOW, 400.0), summary("west", NOW, 100.0)];
    let refs: Vec<Option<&ClusterSummary>> = summaries.iter().map(Some).collect();
    // West: 100 + 60 ms, then 40 ms of prefill per 4 pods for each request sent since.
    let fresh = rank_clusters(&config(), &refs, &[0, 0, 0], "m", RequestClass::Latency, NOW).unwrap();
    assert_eq!(fresh.ranked[0].cluster, "west");
    let herded = rank_clusters(&config(), &refs, &[0, 0, 40], "m", RequestClass::Latency, NOW).unwrap();
    assert_eq!(herded.ranked[2].state, ClusterState::Ready { predicted_ttft_ms: 560.0 });
    assert_eq!(names(&herded), ["east-b", "east-a", "west"], "west no longer meets the target");
}

#[test]
fn stale_and_down_clusters_are_drained_to_the_end_of_the_list() {
    let mut down = summary("east-b", NOW, 10.0);
    down.gateway_healthy = false;
    let stale = summary("east-a", NOW - 2_001, 10.0);
    let west = summary("west", NOW - 1_999, 300.0);
    let decision =
        rank_clusters(&config(), &[Some(&stale), Some(&down), Some(&west)], &[], "m", RequestClass::Latency, NOW)
            .unwrap();
    assert_eq!(names(&decision), ["west", "east-a", "east-b"]);
    assert_eq!(decision.ranked[1].state, ClusterState::Stale);
    assert_eq!(decision.ranked[2].state, ClusterState::GatewayDown);
}

#[test]
fn a_summary_is_stale_after_two_of_its_agents_intervals_or_the_cap() {
    let mut fresh = summary("west", NOW - 150, 100.0);
    fresh.interval_ms = 100;
    assert!(!fresh.is_stale(NOW, 2_000));
    fresh.created_at_ms = NOW - 201;
    assert!(fresh.is_stale(NOW, 2_000), "two intervals of 100 ms went by");
    fresh.interval_ms = 5_000;
    assert!(!fresh.is_stale(NOW, 2_000));
    fresh.created_at_ms = NOW - 2_001;
    assert!(fresh.is_stale(NOW, 2_000), "capped by summary_max_age_ms");
}

#[test]
fn with_no_summaries_yet_every_cluster_is_tried_local_region_first() {
    let decision = rank_clusters(&config(), &[None, None, None], &[], "m", RequestClass::Latency, NOW).unwrap();
    assert_eq!(names(&decision), ["east-b", "east-a", "west"]);
}

#[test]
fn a_model_no_fresh_summary_lists_is_not_found_and_others_skip_clusters_without_it() {
    let summaries = [summary("east-a", NOW, 100.0), summary("east-b", NOW, 100.0), summary("west", NOW, 100.0)];
    let refs: Vec<Option<&ClusterSummary>> = summaries.iter().map(Some).collect();
    let error = rank_clusters(&config(), &refs, &[], "other", RequestClass::Latency, NOW).unwrap_err();
    assert_eq!((error.status, error.code), (404, "model_not_found"));

    let mut only_west = summaries.clone();
    only_west[0].models.clear();
    only_west[1].models.clear();
    let refs: Vec<Option<&ClusterSummary>> = only_west.iter().map(Some).collect();
    let decision = rank_clusters(&config(), &refs, &[], "m", RequestClass::Latency, NOW).unwrap();
    assert_eq!(names(&decision), ["west"]);
}

#[test]
fn summaries_round_trip_and_garbage_is_refused_precisely() {
    let original = summary("west", NOW, 120.0);
    assert_eq!(ClusterSummary::decode(&original.encode().unwrap()).unwrap(), original);
    assert!(matches!(ClusterSummary::decode(b"\xc1garbage"), Err(SummaryError::Decode(_))));
    let mut bad = original.clone();
    bad.models[0].predicted_ttft_ms = f64::NAN;
    assert!(matches!(ClusterSummary::decode(&bad.encode().unwrap()), Err(SummaryError::BadNumber { .. })));
    let mut future = original;
    future.version = 9;
    assert!(matches!(ClusterSummary::decode(&future.encode().unwrap()), Err(SummaryError::Version { found: 9 })));
    assert!(matches!(ClusterSummary::decode(&vec![0u8; MAX_SUMMARY_BYTES + 1]), Err(SummaryError::TooLarge { .. })));
}

#[test]
fn the_fuzz_seed_summary_decodes() {
    let seed = include_bytes!("../../../fuzz/seeds/snapshot_decode/summary.msgpack");
    let summary = ClusterSummary::decode(seed).unwrap();
    assert_eq!((summary.cluster.as_str(), summary.interval_ms, summary.models.len()), ("east", 100, 1));
}

#[cfg(feature = "yaml")]
#[test]
fn the_global_config_reports_errors_with_their_line() {
    let text = "version: 1\nglobal:\n  local_region: east\nclusters:\n  - name: a\n    region: east\n    gateway: 127.0.0.1:1\n    cost_per_million_tokens: 1\n  - name: a\n    region: west\n    gateway: 127.0.0.1:2\n    cost_per_million_tokens: 2\n";
    let error = GlobalRouterConfig::from_yaml_str(text, "g.yaml").unwrap_err();
    let rendered = error.to_string();
    assert!(rendered.starts_with("g.yaml:9:"), "{rendered}");
    assert!(rendered.contains("clusters[1].name: duplicate cluster name \"a\""), "{rendered}");
}

mod summarizing {
    use super::super::summarize;
    use crate::config::{ModelConfig, PoolConfig, RoutingConfig, RoutingSettings};
    use crate::endpoint::Endpoint;
    use crate::snapshot::{PodSignals, PodState, PoolState, SNAPSHOT_VERSION, Snapshot};

    fn pod(port: u16, waiting: f64, scraped_at_ms: u64) -> PodState {
        PodState::scraped(
            Endpoint::new(std::net::SocketAddr::from(([127, 0, 0, 1], port))),
            scraped_at_ms,
            PodSignals { waiting: Some(waiting), running: Some(8.0), kv_cache_usage: Some(0.5), ..Default::default() },
        )
    }

    fn snapshot(pods: Vec<PodState>) -> Snapshot {
        let pool = PoolConfig {
            name: "a".into(),
            metrics_path: None,
            engine: Default::default(),
            endpoints: pods.iter().map(|p| p.address).collect(),
            discovery: None,
            profile: None,
            weights: None,
            disaggregation: None,
        };
        Snapshot {
            version: SNAPSHOT_VERSION,
            sequence: 1,
            created_at_ms: 10_000,
            routing: RoutingConfig {
                settings: RoutingSettings::default(),
                flow_control: Default::default(),
                pools: vec![pool],
                models: vec![ModelConfig {
                    name: "m".into(),
                    pool: "a".into(),
                    adapter: None,
                    criticality: Default::default(),
                }],
            },
            pools: vec![PoolState { name: "a".into(), pods }],
            peers: Default::default(),
        }
    }

    #[test]
    fn a_summary_counts_fresh_pods_and_predicts_more_wait_for_a_busier_cluster() {
        let idle = summarize(&snapshot(vec![pod(1, 0.0, 10_000), pod(2, 0.0, 10_000)]), "east", 7, true, 10_000, 100);
        assert_eq!((idle.cluster.as_str(), idle.sequence, idle.gateway_healthy), ("east", 7, true));
        let model = &idle.models[0];
        assert_eq!((model.model.as_str(), model.ready_pods, model.running), ("m", 2, 16.0));
        assert!((model.kv_cache_usage - 0.5).abs() < 1e-9);

        let busy = summarize(&snapshot(vec![pod(1, 30.0, 10_000), pod(2, 30.0, 10_000)]), "east", 8, true, 10_000, 100);
        assert!(
            busy.models[0].predicted_ttft_ms > model.predicted_ttft_ms,
            "busy {} vs idle {}",
            busy.models[0].predicted_ttft_ms,
            model.predicted_ttft_ms
        );

        // A pod whose signals are older than signal_max_age_ms does not count.
        let stale = summarize(&snapshot(vec![pod(1, 0.0, 10_000), pod(2, 0.0, 1_000)]), "east", 9, true, 10_000, 100);
        assert_eq!(stale.models[0].ready_pods, 1);
    }
}
