use super::*;
use crate::config::{ModelConfig, PoolConfig, RoutingSettings};
use crate::snapshot::{PodSignals, PodState, PoolState, SNAPSHOT_VERSION};

fn ep(port: u16) -> Endpoint {
    Endpoint::new(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
}

fn config() -> RoutingConfig {
    RoutingConfig {
        settings: RoutingSettings::default(),
        pools: vec![
            PoolConfig {
                name: "a".into(),
                engine: Default::default(),
                endpoints: vec![ep(1), ep(2), ep(3)],
                weights: None,
            },
            PoolConfig {
                name: "b".into(),
                engine: Default::default(),
                endpoints: vec![ep(9)],
                weights: None,
            },
        ],
        models: vec![
            ModelConfig {
                name: "base".into(),
                pool: "a".into(),
                adapter: None,
            },
            ModelConfig {
                name: "lora".into(),
                pool: "a".into(),
                adapter: Some("sql".into()),
            },
            ModelConfig {
                name: "other".into(),
                pool: "b".into(),
                adapter: None,
            },
        ],
    }
}

fn request(model: &str) -> InferenceRequest {
    InferenceRequest {
        model: model.into(),
        stream: false,
    }
}

fn pod(port: u16, waiting: f64, kv: f64, scraped_at_ms: u64) -> PodState {
    PodState {
        address: ep(port),
        ready: true,
        scraped_at_ms: Some(scraped_at_ms),
        signals: Some(PodSignals {
            waiting,
            running: waiting,
            kv_cache_usage: kv,
            ..Default::default()
        }),
    }
}

fn snapshot(pods: Vec<PodState>) -> Snapshot {
    Snapshot {
        version: SNAPSHOT_VERSION,
        sequence: 1,
        created_at_ms: 1_000,
        routing: config(),
        pools: vec![PoolState {
            name: "a".into(),
            pods,
        }],
    }
}

#[test]
fn unknown_model_is_404() {
    let mut router = Router::new(config(), 1);
    let err = router.route(&request("nope"), 0).unwrap_err();
    assert_eq!((err.status, err.code), (404, "model_not_found"));
}

#[test]
fn each_model_goes_to_its_pool_with_its_adapter() {
    let mut router = Router::new(config(), 1);
    let d = router.route(&request("other"), 0).unwrap();
    assert_eq!(
        (d.pool.as_str(), d.endpoints.as_slice()),
        ("b", [ep(9)].as_slice())
    );
    let d = router.route(&request("lora"), 0).unwrap();
    assert_eq!((d.pool.as_str(), d.adapter.as_deref()), ("a", Some("sql")));
}

#[test]
fn without_a_snapshot_it_spreads_on_in_flight_counts() {
    let mut router = Router::new(config(), 1);
    let mut firsts = Vec::new();
    for _ in 0..3 {
        let d = router.route(&request("base"), 0).unwrap();
        assert_eq!(d.basis, DecisionBasis::LoadOnly);
        firsts.push(d.endpoints[0]);
    }
    firsts.sort();
    assert_eq!(
        firsts,
        vec![ep(1), ep(2), ep(3)],
        "each pod gets one before any gets two"
    );
}

#[test]
fn fresh_signals_pick_the_idle_pod_and_rank_the_rest() {
    let mut router = Router::new(config(), 1);
    router.apply_snapshot(snapshot(vec![
        pod(1, 8.0, 0.9, 1_000),
        pod(2, 0.0, 0.1, 1_000),
        pod(3, 3.0, 0.5, 1_000),
    ]));
    let d = router.route(&request("base"), 1_100).unwrap();
    assert_eq!(d.basis, DecisionBasis::Signals);
    assert_eq!(d.endpoints, vec![ep(2), ep(3), ep(1)]);
    assert_eq!(d.endpoint_header(), "127.0.0.1:2,127.0.0.1:3,127.0.0.1:1");
}

#[test]
fn a_burst_spreads_between_snapshots() {
    let mut router = Router::new(config(), 1);
    router.apply_snapshot(snapshot(vec![
        pod(1, 0.0, 0.2, 1_000),
        pod(2, 0.0, 0.2, 1_000),
        pod(3, 0.0, 0.2, 1_000),
    ]));
    let mut per_pod = std::collections::HashMap::new();
    for _ in 0..30 {
        *per_pod
            .entry(router.route(&request("base"), 1_010).unwrap().endpoints[0])
            .or_insert(0) += 1;
    }
    assert!(
        per_pod.values().all(|&n| (9..=11).contains(&n)),
        "{per_pod:?}"
    );
}

#[test]
fn stale_signals_are_ignored() {
    let mut router = Router::new(config(), 1);
    router.apply_snapshot(snapshot(vec![
        pod(1, 0.0, 0.0, 1_000),
        pod(2, 50.0, 1.0, 1_000),
        pod(3, 50.0, 1.0, 1_000),
    ]));
    let d = router.route(&request("base"), 1_000 + 5_000).unwrap();
    assert_eq!(d.basis, DecisionBasis::LoadOnly);
}

#[test]
fn no_ready_pod_is_503_with_retry_after() {
    let mut router = Router::new(config(), 1);
    let mut pods = vec![pod(1, 0.0, 0.0, 1_000)];
    pods[0].ready = false;
    router.apply_snapshot(snapshot(pods));
    let err = router.route(&request("base"), 1_000).unwrap_err();
    assert_eq!((err.status, err.retry_after_s), (503, Some(1)));
}

#[test]
fn release_lowers_the_in_flight_count() {
    let mut router = Router::new(config(), 1);
    let first = router.route(&request("other"), 0).unwrap().endpoints[0];
    assert_eq!(router.in_flight(first), 1);
    router.release(first);
    assert_eq!(router.in_flight(first), 0);
}

#[test]
fn model_list_names_every_model() {
    let router = Router::new(config(), 1);
    let body: serde_json::Value = serde_json::from_slice(&router.model_list_body(5)).unwrap();
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["base", "lora", "other"]);
    assert_eq!(body["object"], "list");
}
