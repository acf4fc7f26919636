use super::*;
use crate::config::{LearnedSpeeds, ModelConfig, PoolConfig, RoutingSettings};
use crate::snapshot::{PodSignals, PodState, PoolState, SNAPSHOT_VERSION};

fn ep(port: u16) -> Endpoint {
    Endpoint::new(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
}

fn pool(name: &str, ports: &[u16]) -> PoolConfig {
    PoolConfig {
        name: name.into(),
        metrics_path: None,
        engine: Default::default(),
        endpoints: ports.iter().map(|&p| ep(p)).collect(),
        discovery: None,
        profile: None,
        weights: None,
        disaggregation: None,
    }
}

fn config() -> RoutingConfig {
    RoutingConfig {
        settings: RoutingSettings::default(),
        flow_control: Default::default(),
        pools: vec![pool("a", &[1, 2, 3]), pool("b", &[9]), pool("wide", &[11, 12, 13, 14, 15, 16, 17, 18])],
        models: vec![
            ModelConfig { name: "base".into(), pool: "a".into(), adapter: None, criticality: Default::default() },
            ModelConfig {
                name: "lora".into(),
                pool: "a".into(),
                adapter: Some("sql".into()),
                criticality: Default::default(),
            },
            ModelConfig { name: "other".into(), pool: "b".into(), adapter: None, criticality: Default::default() },
            ModelConfig { name: "wide".into(), pool: "wide".into(), adapter: None, criticality: Default::default() },
        ],
    }
}

fn request(model: &str) -> InferenceRequest {
    chat(model, "hello there")
}

fn chat(model: &str, prompt: &str) -> InferenceRequest {
    InferenceRequest::of_text(model, prompt.as_bytes(), &RoutingSettings::default().prefix)
}

fn signals(waiting: f64, kv: f64) -> PodSignals {
    PodSignals {
        waiting: Some(waiting),
        running: Some(waiting),
        kv_cache_usage: Some(kv),
        max_loras: Some(2),
        ..Default::default()
    }
}

fn pod(port: u16, waiting: f64, kv: f64, scraped_at_ms: u64) -> PodState {
    PodState::scraped(ep(port), scraped_at_ms, signals(waiting, kv))
}

fn snapshot(pool_name: &str, pods: Vec<PodState>) -> Snapshot {
    Snapshot {
        version: SNAPSHOT_VERSION,
        sequence: 1,
        created_at_ms: 1_000,
        routing: config(),
        pools: vec![PoolState { name: pool_name.into(), pods }],
        peers: Default::default(),
    }
}

/// The prompt's prefix keys, from a router of its own: routing records the prefix on
/// the chosen pod at once, which these tests set up by hand.
fn hashes_of(request: &InferenceRequest) -> PrefixChain {
    Router::new(config(), 1).route(request, 0, &mut LocalLedger::default()).map(|d| d.prefix).unwrap_or_default()
}

fn router_with(snapshot_pods: Vec<PodState>) -> (Router, LocalLedger) {
    let mut router = Router::new(config(), 1);
    let ledger = LocalLedger::default();
    router.apply_snapshot(snapshot("a", snapshot_pods), &ledger);
    (router, ledger)
}

#[test]
fn unknown_model_is_404() {
    let mut router = Router::new(config(), 1);
    let err = router.route(&request("nope"), 0, &mut LocalLedger::default()).unwrap_err();
    assert_eq!((err.status, err.code), (404, "model_not_found"));
}

#[test]
fn each_model_goes_to_its_pool_with_its_adapter() {
    let mut router = Router::new(config(), 1);
    let mut ledger = LocalLedger::default();
    let d = router.route(&request("other"), 0, &mut ledger).unwrap();
    assert_eq!((d.pool.as_str(), d.endpoints.as_slice()), ("b", [ep(9)].as_slice()));
    let d = router.route(&request("lora"), 0, &mut ledger).unwrap();
    assert_eq!((d.pool.as_str(), d.adapter.as_deref()), ("a", Some("sql")));
}

#[test]
fn without_a_snapshot_it_spreads_on_in_flight_counts() {
    let mut router = Router::new(config(), 1);
    let mut ledger = LocalLedger::default();
    let mut firsts = Vec::new();
    for _ in 0..3 {
        let d = router.route(&request("base"), 0, &mut ledger).unwrap();
        assert_eq!(d.basis, DecisionBasis::LoadOnly);
        firsts.push(d.endpoints[0]);
    }
    firsts.sort();
    assert_eq!(firsts, vec![ep(1), ep(2), ep(3)], "each pod gets one before any gets two");
}

#[test]
fn fresh_signals_pick_the_idle_pod_and_rank_the_rest() {
    let (mut router, mut ledger) =
        router_with(vec![pod(1, 8.0, 0.5, 1_000), pod(2, 0.0, 0.1, 1_000), pod(3, 3.0, 0.5, 1_000)]);
    let d = router.route(&request("base"), 1_100, &mut ledger).unwrap();
    assert_eq!(d.basis, DecisionBasis::Signals);
    assert_eq!(d.endpoints, vec![ep(2), ep(3), ep(1)]);
    assert_eq!(d.endpoint_header(), "127.0.0.1:2,127.0.0.1:3,127.0.0.1:1");
    assert!(d.explain().contains("runner_up=127.0.0.1:3"), "{}", d.explain());
}

#[test]
fn a_burst_of_identical_requests_spreads_within_fair_share_plus_two() {
    let mut router = Router::new(config(), 1);
    let mut ledger = LocalLedger::default();
    let pods: Vec<PodState> = (11..=18).map(|p| pod(p, 0.0, 0.1, 1_000)).collect();
    router.apply_snapshot(snapshot("wide", pods), &ledger);
    let mut per_pod = HashMap::new();
    for _ in 0..64 {
        let d = router.route(&chat("wide", &"same prompt ".repeat(50)), 1_005, &mut ledger).unwrap();
        *per_pod.entry(d.endpoints[0]).or_insert(0) += 1;
    }
    assert_eq!(per_pod.len(), 8, "{per_pod:?}");
    assert!(per_pod.values().all(|&n| n <= 64 / 8 + 2), "{per_pod:?}");
}

#[test]
fn stale_signals_fall_back_to_in_flight_counts() {
    let (mut router, mut ledger) =
        router_with(vec![pod(1, 0.0, 0.0, 1_000), pod(2, 50.0, 0.5, 1_000), pod(3, 50.0, 0.5, 1_000)]);
    let d = router.route(&request("base"), 1_000 + 5_000, &mut ledger).unwrap();
    assert_eq!(d.basis, DecisionBasis::LoadOnly);
    assert_eq!(d.chosen.kv_cache_usage, None, "stale KV is not used");
}

/// A pod whose engine release exports none of the load gauges (trtllm-serve with
/// latency histograms only).
fn pod_without_load_gauges(port: u16, scraped_at_ms: u64) -> PodState {
    PodState::scraped(ep(port), scraped_at_ms, PodSignals { max_loras: Some(2), ..Default::default() })
}

#[test]
fn unknown_load_signals_are_estimated_from_in_flight_counts_not_read_as_zero() {
    let (mut router, mut ledger) =
        router_with(vec![pod_without_load_gauges(1, 1_000), pod_without_load_gauges(2, 1_000)]);
    let mut chosen = Vec::new();
    for _ in 0..4 {
        let d = router.route(&request("base"), 1_010, &mut ledger).unwrap();
        assert_eq!(d.basis, DecisionBasis::Signals, "the pods report: their scrapes are fresh");
        assert_eq!(d.chosen.kv_cache_usage, None, "unknown KV stays unknown");
        chosen.push((d.endpoints[0], d.chosen.running));
    }
    let on = |p: u16| chosen.iter().filter(|(e, _)| *e == ep(p)).count();
    assert_eq!((on(1), on(2)), (2, 2), "{chosen:?}");
    assert_eq!(chosen[2].1, 1.0, "the third request sees one in flight on its pod, not an idle pod: {chosen:?}");
}

#[test]
fn unknown_kv_use_alone_keeps_the_reported_queue() {
    let mut llama = pod(1, 3.0, 0.0, 1_000);
    llama.signals.as_mut().unwrap().kv_cache_usage = None;
    let (mut router, mut ledger) = router_with(vec![llama, pod(2, 0.0, 0.2, 1_000)]);
    let d = router.route(&request("base"), 1_010, &mut ledger).unwrap();
    assert_eq!(d.endpoints, vec![ep(2), ep(1)], "the pod with three waiting ranks last");
    let llama = d.runner_up.unwrap();
    assert_eq!((llama.waiting, llama.kv_cache_usage), (3.0, None));
}

#[test]
fn a_pod_without_metrics_yet_is_usable_but_not_preferred() {
    let mut pods = vec![pod(1, 0.0, 0.1, 1_000), pod(2, 0.0, 0.1, 1_000)];
    pods.push(PodState { address: ep(3), ready: true, role: Default::default(), scraped_at_ms: None, signals: None });
    let (mut router, mut ledger) = router_with(pods);
    let d = router.route(&request("base"), 1_010, &mut ledger).unwrap();
    assert_ne!(d.endpoints[0], ep(3));
    assert!(d.endpoints.contains(&ep(3)), "still a retry target");
    assert_eq!(d.basis, DecisionBasis::Mixed);
}

#[test]
fn no_ready_pod_is_503_with_retry_after() {
    let mut pods = vec![pod(1, 0.0, 0.0, 1_000)];
    pods[0].ready = false;
    let (mut router, mut ledger) = router_with(pods);
    let err = router.route(&request("base"), 1_000, &mut ledger).unwrap_err();
    assert_eq!((err.status, err.retry_after_s), (503, Some(1)));
}

#[test]
fn an_empty_pool_in_the_snapshot_is_503() {
    let (mut router, mut ledger) = router_with(Vec::new());
    let err = router.route(&request("base"), 1_000, &mut ledger).unwrap_err();
    assert_eq!(err.code, "no_ready_endpoint");
}

#[test]
fn a_full_kv_cache_costs_the_wait_for_room_instead_of_excluding_the_pod() {
    // An idle pod with a full cache waits for a running request to finish; a pod with
    // nine queued requests and room is faster, and the full one stays a retry target.
    let (mut router, mut ledger) = router_with(vec![pod(1, 0.0, 0.99, 1_000), pod(2, 9.0, 0.5, 1_000)]);
    let d = router.route(&request("base"), 1_010, &mut ledger).unwrap();
    assert_eq!(d.endpoints, vec![ep(2), ep(1)], "{}", d.explain());
    assert!(d.runner_up.is_some_and(|r| r.ttft.kv_wait_ms > 0.0), "{}", d.explain());
}

#[test]
fn the_weighted_mode_skips_pods_over_the_kv_threshold_unless_all_are() {
    let weighted = |pods: Vec<PodState>| {
        let mut snap = snapshot("a", pods);
        snap.routing.settings.scoring = ScoringMode::Weighted;
        let mut router = Router::new(config(), 1);
        let mut ledger = LocalLedger::default();
        router.apply_snapshot(snap, &ledger);
        router.route(&request("base"), 1_010, &mut ledger).unwrap().endpoints
    };
    assert_eq!(weighted(vec![pod(1, 0.0, 0.99, 1_000), pod(2, 9.0, 0.5, 1_000)]), vec![ep(2)]);
    assert_eq!(weighted(vec![pod(1, 0.0, 0.99, 1_000), pod(2, 9.0, 0.98, 1_000)]).len(), 2);
}

#[test]
fn the_next_turn_goes_to_the_pod_that_holds_the_conversation() {
    let (mut router, mut ledger) =
        router_with(vec![pod(1, 1.0, 0.2, 1_000), pod(2, 1.0, 0.2, 1_000), pod(3, 1.0, 0.2, 1_000)]);
    let system = "You are a helpful assistant. ".repeat(80);
    let turn1 = chat("base", &format!("{system}<|user|>first question"));
    let d1 = router.route(&turn1, 1_010, &mut ledger).unwrap();
    router.record_prefix(d1.chosen.endpoint, &d1.prefix);
    router.release(d1.chosen.endpoint, d1.pending_prefill_tokens, &mut ledger);
    for i in 0..10 {
        let next = chat("base", &format!("{system}<|user|>first question<|assistant|>answer<|user|>follow-up {i}"));
        let d = router.route(&next, 1_020, &mut ledger).unwrap();
        assert_eq!(d.chosen.endpoint, d1.chosen.endpoint, "{}", d.explain());
        assert!(d.chosen.matched_blocks > 30);
        router.release(d.chosen.endpoint, d.pending_prefill_tokens, &mut ledger);
    }
}

#[test]
fn a_busy_prefix_owner_spills_to_an_idle_pod() {
    let (mut router, mut ledger) = router_with(vec![pod(1, 40.0, 0.6, 1_000), pod(2, 0.0, 0.1, 1_000)]);
    let prompt = chat("base", &"shared system prompt ".repeat(20));
    let hashes = hashes_of(&prompt);
    router.record_prefix(ep(1), &hashes);
    let d = router.route(&prompt, 1_010, &mut ledger).unwrap();
    assert_eq!(d.chosen.endpoint, ep(2));
    assert!(d.spilled);
    // With two pods the owner is the runner-up, reported once.
    assert!(d.owner.is_none() && d.explain().contains("runner_up=127.0.0.1:1"), "{}", d.explain());
}

#[test]
fn a_spilled_decision_explains_the_owner_it_passed_over() {
    let pods = vec![pod(1, 40.0, 0.6, 1_000), pod(2, 0.0, 0.1, 1_000), pod(3, 0.0, 0.1, 1_000)];
    let (mut router, mut ledger) = router_with(pods);
    let prompt = chat("base", &"shared system prompt ".repeat(20));
    router.record_prefix(ep(1), &hashes_of(&prompt));
    let d = router.route(&prompt, 1_010, &mut ledger).unwrap();
    assert!(d.spilled && d.chosen.endpoint != ep(1), "{}", d.explain());
    let owner = d.owner.expect("the owner ranked third is reported");
    assert_eq!(owner.endpoint, ep(1));
    assert!(owner.matched_blocks > d.chosen.matched_blocks);
    assert!(d.explain().contains("; owner=127.0.0.1:1 score=-"), "{}", d.explain());
}

#[test]
fn a_lora_request_prefers_the_pod_with_the_adapter_running() {
    let mut pods = vec![pod(1, 0.0, 0.2, 1_000), pod(2, 0.0, 0.2, 1_000), pod(3, 0.0, 0.2, 1_000)];
    pods[1].signals.as_mut().unwrap().running_adapters = vec!["sql".into()];
    pods[2].signals.as_mut().unwrap().running_adapters = vec!["x".into(), "y".into()];
    let (mut router, mut ledger) = router_with(pods);
    let d = router.route(&request("lora"), 1_010, &mut ledger).unwrap();
    assert_eq!(d.chosen.endpoint, ep(2));
    assert_eq!(d.endpoints.last(), Some(&ep(3)), "the pod whose slots all serve running requests ranks last");
}

#[test]
fn an_adapter_request_never_goes_to_a_pod_that_reports_no_lora_slots() {
    // Pod 1 reports LoRA slots but is busy; pod 2 is idle and reports none (vLLM
    // started without LoRA answers an adapter request 404); pod 3 has not reported.
    let mut pods = vec![
        pod(1, 6.0, 0.6, 1_000),
        pod(2, 0.0, 0.0, 1_000),
        PodState { address: ep(3), ready: true, role: Default::default(), scraped_at_ms: None, signals: None },
    ];
    pods[1].signals.as_mut().unwrap().max_loras = None;
    let (mut router, mut ledger) = router_with(pods.clone());
    for _ in 0..20 {
        let d = router.route(&request("lora"), 1_010, &mut ledger).unwrap();
        assert!(!d.endpoints.contains(&ep(2)), "{:?}", d.endpoints);
    }
    // A base-model request may go there, and does: it is idle.
    let (mut router, mut ledger) = router_with(pods.clone());
    assert_eq!(router.route(&request("base"), 1_010, &mut ledger).unwrap().chosen.endpoint, ep(2));
    // When no pod reports LoRA slots, nothing is known either way: every pod stays.
    pods[0].signals.as_mut().unwrap().max_loras = None;
    let (mut router, mut ledger) = router_with(pods);
    assert_eq!(router.route(&request("lora"), 1_010, &mut ledger).unwrap().chosen.endpoint, ep(2));
}

#[test]
fn an_adapter_request_never_goes_to_a_pod_whose_model_list_lacks_the_adapter() {
    // Pod 1 lists `sql` but is busy; pod 2 is idle and lists another adapter (vLLM
    // started without `sql` answers a request for it 404); pod 3's list was not read.
    let mut pods = vec![pod(1, 6.0, 0.6, 1_000), pod(2, 0.0, 0.0, 1_000), pod(3, 0.0, 0.0, 1_000)];
    pods[0].signals.as_mut().unwrap().served_adapters = Some(vec!["sql".into()]);
    pods[1].signals.as_mut().unwrap().served_adapters = Some(vec!["other".into()]);
    let (mut router, mut ledger) = router_with(pods.clone());
    for _ in 0..20 {
        let d = router.route(&request("lora"), 1_010, &mut ledger).unwrap();
        assert!(!d.endpoints.contains(&ep(2)), "{:?}", d.endpoints);
    }
    // A base-model request may go there.
    let (mut router, mut ledger) = router_with(pods.clone());
    assert!([ep(2), ep(3)].contains(&router.route(&request("base"), 1_010, &mut ledger).unwrap().chosen.endpoint));
    // A list older than `adapter_max_age_ms` says nothing: with no pod's list fresh,
    // every pod stays.
    let (mut router, mut ledger) = router_with(pods.clone());
    let late = 1_000 + RoutingSettings::default().adapter_max_age_ms + 1;
    let d = router.route(&request("lora"), late, &mut ledger).unwrap();
    assert!(d.endpoints.contains(&ep(2)), "{:?}", d.endpoints);
    // With the one pod that lists it not ready, the others are tried rather than none.
    let mut down = pods.clone();
    down[0].ready = false;
    let (mut router, mut ledger) = router_with(down);
    let d = router.route(&request("lora"), 1_010, &mut ledger).unwrap();
    assert!(d.endpoints.contains(&ep(2)), "{:?}", d.endpoints);
    // When no pod lists the adapter, nothing is known either way: every pod stays.
    pods[0].signals.as_mut().unwrap().served_adapters = Some(Vec::new());
    let (mut router, mut ledger) = router_with(pods);
    let d = router.route(&request("lora"), 1_010, &mut ledger).unwrap();
    assert!(d.endpoints.contains(&ep(2)), "{:?}", d.endpoints);
}

#[test]
fn the_weighted_mode_ranks_by_score() {
    let mut cfg = config();
    cfg.settings.scoring = crate::config::ScoringMode::Weighted;
    let mut router = Router::new(cfg.clone(), 1);
    let ledger = LocalLedger::default();
    let mut snap = snapshot("a", vec![pod(1, 8.0, 0.9, 1_000), pod(2, 0.0, 0.1, 1_000), pod(3, 3.0, 0.5, 1_000)]);
    snap.routing = cfg;
    router.apply_snapshot(snap, &ledger);
    let d = router.route(&request("base"), 1_100, &mut LocalLedger::default()).unwrap();
    assert_eq!(d.endpoints[0], ep(2));
    assert!(d.explain().contains("scoring=weighted"));
}

#[test]
fn release_lowers_the_in_flight_count_and_the_unanswered_prefill() {
    let mut router = Router::new(config(), 1);
    let mut ledger = LocalLedger::default();
    let decision = router.route(&request("other"), 0, &mut ledger).unwrap();
    let first = decision.endpoints[0];
    assert_eq!(ledger.load(first).in_flight, 1);
    assert!(ledger.load(first).pending_prefill_tokens > 0);
    router.release(first, decision.pending_prefill_tokens, &mut ledger);
    assert_eq!(ledger.load(first), PodLoad::default(), "an unanswered request's prefill goes with it");
}

#[test]
fn pods_that_leave_are_forgotten_by_the_prefix_index() {
    let (mut router, ledger) = router_with(vec![pod(1, 0.0, 0.1, 1_000), pod(2, 0.0, 0.1, 1_000)]);
    router.record_prefix(ep(2), &PrefixChain { keys: vec![1, 2, 3], ends: vec![1, 2, 3], blocks: 3 });
    router.apply_snapshot(snapshot("a", vec![pod(1, 0.0, 0.1, 2_000)]), &ledger);
    assert_eq!(router.prefix_index().blocks_of(ep(2)), 0);
}

#[test]
fn model_list_names_every_model() {
    let router = Router::new(config(), 1);
    let body: serde_json::Value = serde_json::from_slice(&router.model_list_body(5)).unwrap();
    let ids: Vec<&str> = body["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["base", "lora", "other", "wide"]);
}

#[test]
fn a_saturated_pool_sheds_sheddable_requests_and_routes_the_others() {
    let saturated = vec![pod(1, 6.0, 0.5, 1_000), pod(2, 0.0, 0.9, 1_000), pod(3, 8.0, 0.9, 1_000)];
    let (mut router, mut ledger) = router_with(saturated);
    let sheddable = InferenceRequest { criticality: Some(Criticality::Sheddable), ..request("base") };
    let err = router.route(&sheddable, 1_010, &mut ledger).unwrap_err();
    assert_eq!((err.status, err.code, err.retry_after_s), (429, "pool_saturated", Some(1)));
    assert_eq!(ledger.load(ep(2)), PodLoad::default(), "a shed request is not counted anywhere");
    assert!(router.route(&request("base"), 1_010, &mut ledger).is_ok(), "standard requests queue");
    let critical = InferenceRequest { criticality: Some(Criticality::Critical), ..request("base") };
    assert!(router.route(&critical, 1_010, &mut ledger).is_ok(), "critical requests queue");

    let (mut router, mut ledger) =
        router_with(vec![pod(1, 6.0, 0.5, 1_000), pod(2, 0.0, 0.3, 1_000), pod(3, 8.0, 0.9, 1_000)]);
    assert!(router.route(&sheddable, 1_010, &mut ledger).is_ok(), "pod 2 has room");
    // Signals older than their max age: the gateway cannot tell, so it admits.
    let (mut router, mut ledger) = router_with(vec![pod(1, 6.0, 0.9, 0), pod(2, 6.0, 0.9, 0), pod(3, 6.0, 0.9, 0)]);
    assert!(router.route(&sheddable, 5_000, &mut ledger).is_ok());
}

#[test]
fn a_sheddable_model_is_shed_without_any_header() {
    let mut routing = config();
    routing.models[0].criticality = Criticality::Sheddable;
    let mut router = Router::new(routing.clone(), 1);
    let mut ledger = LocalLedger::default();
    let mut snap = snapshot("a", vec![pod(1, 9.0, 0.9, 1_000), pod(2, 9.0, 0.9, 1_000), pod(3, 9.0, 0.9, 1_000)]);
    snap.routing = routing;
    router.apply_snapshot(snap, &ledger);
    assert_eq!(router.route(&request("base"), 1_010, &mut ledger).unwrap_err().status, 429);
    let raised = InferenceRequest { criticality: Some(Criticality::Critical), ..request("base") };
    assert_eq!(router.route(&raised, 1_010, &mut ledger).unwrap_err().status, 429, "a client cannot raise it");
}

#[test]
fn a_pod_with_stale_signals_among_fresh_ones_gets_no_prefix_credit() {
    let long = "You are a helpful assistant. ".repeat(80);
    let route_with_pod3_scraped_at = |scraped_at_ms: u64| {
        let (mut router, mut ledger) =
            router_with(vec![pod(1, 0.0, 0.1, 1_000), pod(2, 0.0, 0.1, 1_000), pod(3, 0.0, 0.1, scraped_at_ms)]);
        router.record_prefix(ep(3), &hashes_of(&chat("base", &long)));
        router.route(&chat("base", &long), 1_010, &mut ledger).unwrap()
    };
    let fresh = route_with_pod3_scraped_at(1_000);
    assert_eq!((fresh.chosen.endpoint, fresh.basis), (ep(3), DecisionBasis::Signals), "{}", fresh.explain());
    let stale = route_with_pod3_scraped_at(0);
    assert_eq!(stale.basis, DecisionBasis::Mixed);
    assert_eq!(stale.chosen.matched_blocks, 0, "{}", stale.explain());
    assert!(!stale.spilled, "no pod counts as holding the prefix: {}", stale.explain());
}

#[test]
fn a_pod_never_looks_less_loaded_than_its_in_flight_count() {
    let mut router = Router::new(config(), 1);
    let mut ledger = LocalLedger::default();
    // Five requests hang on pod 1, which reports itself idle (its metrics froze, or it
    // never admitted them).
    ledger.update(ep(1), 5, 0);
    router.apply_snapshot(
        snapshot("a", vec![pod(1, 0.0, 0.1, 1_000), pod(2, 1.0, 0.1, 1_000), pod(3, 1.0, 0.1, 1_000)]),
        &ledger,
    );
    for _ in 0..10 {
        let d = router.route(&request("base"), 1_010, &mut ledger).unwrap();
        assert_ne!(d.chosen.endpoint, ep(1), "{}", d.explain());
        router.release(d.chosen.endpoint, d.pending_prefill_tokens, &mut ledger);
    }
}

#[test]
fn learned_characters_per_token_size_the_prompt_and_the_pods_prefix_capacity() {
    // Five prompts of 7,000 characters, 1,000 tokens each at 7 characters a token, to one
    // pod of 50 blocks × 128 tokens (6,400 tokens): at the default 4 characters a token
    // the index holds 3.7 of them and forgets the first; at the learned 7 it holds all.
    let prompts: Vec<InferenceRequest> = (0..5).map(|g| chat("other", &format!("{g:07} ").repeat(875))).collect();
    for learned in [false, true] {
        let mut router = Router::new(config(), 1);
        let mut ledger = LocalLedger::default();
        if learned {
            for _ in 0..super::chars_per_token::WARM_UP {
                assert!(router.observe_usage("b", 7_000, 1_000));
            }
        }
        let kv = PodSignals { num_gpu_blocks: Some(50), block_size: Some(128), ..signals(0.0, 0.1) };
        router.apply_snapshot(snapshot("b", vec![PodState::scraped(ep(9), 1_000, kv)]), &ledger);
        let first = router.route(&prompts[0], 1_010, &mut ledger).unwrap();
        // The prompt's tokens, and their attention: 2% more for 1,000, 3.5% for 1,750.
        assert_eq!(first.pending_prefill_tokens, if learned { 1_020 } else { 1_811 });
        for prompt in &prompts[1..] {
            router.route(prompt, 1_010, &mut ledger).unwrap();
        }
        let held = router.prefix_index().matched_keys(ep(9), &first.prefix.keys);
        assert_eq!(held > 0, learned, "learned={learned}: {held} blocks of the first prompt held");
    }
}

#[test]
fn the_pools_median_mean_prompt_prices_every_pods_queue() {
    // Two pods with two requests waiting each; one window of pod 2 held one 100k-token
    // prompt, pod 1's a few short ones. One workload, one figure: their queues price alike.
    let pod_with = |port, mean_prompt| {
        let learned = PodSignals { mean_prompt_tokens: Some(mean_prompt), ..signals(2.0, 0.1) };
        PodState::scraped(ep(port), 1_000, learned)
    };
    let (mut router, _) = router_with(vec![pod_with(1, 300.0), pod_with(2, 100_000.0), pod_with(3, 2_000.0)]);
    let d = router.route(&request("base"), 1_010, &mut LocalLedger::default()).unwrap();
    let runner_up = d.runner_up.unwrap();
    assert_eq!(d.chosen.ttft.queue_ms, runner_up.ttft.queue_ms, "{}", d.explain());
}

#[test]
fn the_pools_median_speed_prices_every_pod_unless_each_pods_own_is_asked_for() {
    let speed = |port, rate| {
        let learned = PodSignals { prefill_tokens_per_s: Some(rate), ..signals(0.0, 0.1) };
        PodState::scraped(ep(port), 1_000, learned)
    };
    for (speeds, chosen) in [(LearnedSpeeds::Pool, None), (LearnedSpeeds::Pod, Some(ep(2)))] {
        let mut config = config();
        config.settings.speeds = speeds;
        let mut router = Router::new(config.clone(), 1);
        let ledger = LocalLedger::default();
        let snapshot =
            Snapshot { routing: config, ..snapshot("a", vec![speed(1, 500.0), speed(2, 2_000.0), speed(3, 1_000.0)]) };
        router.apply_snapshot(snapshot, &ledger);
        let mut firsts = std::collections::HashSet::new();
        for _ in 0..20 {
            let d = router.route(&request("base"), 1_010, &mut LocalLedger::default()).unwrap();
            firsts.insert(d.chosen.endpoint);
            let runner_up = d.runner_up.map(|r| r.ttft.prefill_ms).unwrap_or_default();
            assert_eq!(d.chosen.ttft.prefill_ms == runner_up, chosen.is_none(), "{speeds:?}: {}", d.explain());
        }
        match chosen {
            Some(fastest) => assert_eq!(firsts, [fastest].into(), "{speeds:?}: each pod's own speed"),
            None => assert!(firsts.len() > 1, "{speeds:?}: equal speeds, ties broken at random: {firsts:?}"),
        }
    }
}

#[test]
fn a_new_prefix_goes_to_a_pod_whose_prefix_cache_has_room() {
    // 50 blocks of 128 tokens per pod, 400 blocks of 64 characters at 4 characters a
    // token; pod 1 holds 6 prompts of 63 blocks that later requests matched, so a
    // seventh would evict one of them there. Pod 1's emptier KV cache would win
    // otherwise (a smaller `resident_ms`).
    let kv = |port, usage| {
        let kv = PodSignals { num_gpu_blocks: Some(50), block_size: Some(128), ..signals(0.0, usage) };
        PodState::scraped(ep(port), 1_000, kv)
    };
    let (mut router, _) = router_with(vec![kv(1, 0.0), kv(2, 0.1), kv(3, 0.1)]);
    let mut reused = 0;
    for group in 0..6 {
        let hashes = hashes_of(&chat("base", &format!("{group:03} ").repeat(1_000)));
        router.record_prefix(ep(1), &hashes);
        router.prefix.mark_reused(ep(1), &hashes.keys, hashes.keys.len());
        reused += hashes.keyed_blocks() as u64;
    }
    assert_eq!(router.prefix.reused_blocks_of(ep(1)), reused);
    assert!(reused > 400 - reused / 6, "room for less than one more prompt");
    // Four prompts: the other pods have room for six each.
    for group in 6..10 {
        let d = router
            .route(&chat("base", &format!("{group:03} ").repeat(1_000)), 1_010, &mut LocalLedger::default())
            .unwrap();
        assert!(d.chosen.ttft.evict_ms == 0.0, "{}", d.explain());
        assert_ne!(d.chosen.endpoint, ep(1), "group {group}: {}", d.explain());
        if d.runner_up.is_some_and(|r| r.endpoint == ep(1)) {
            assert!(d.runner_up.is_some_and(|r| r.ttft.evict_ms > 0.0), "{}", d.explain());
        }
    }
}

#[test]
fn other_replicas_in_flight_requests_count_on_pods_without_metrics() {
    // Pods 1-3 have not reported: the ranking is on in-flight counts, and the other
    // replicas have five requests on pod 1 and two on pod 2.
    let unscraped = |port| PodState {
        address: ep(port),
        ready: true,
        role: Default::default(),
        scraped_at_ms: None,
        signals: None,
    };
    let mut snap = snapshot("a", vec![unscraped(1), unscraped(2), unscraped(3)]);
    snap.peers.load = vec![
        crate::replicas::PeerLoad { pod: ep(1), in_flight: 5, pending_prefill_tokens: 5_000 },
        crate::replicas::PeerLoad { pod: ep(2), in_flight: 2, pending_prefill_tokens: 2_000 },
    ];
    let mut router = Router::new(config(), 1);
    let mut ledger = LocalLedger::default();
    router.apply_snapshot(snap, &ledger);
    let firsts: Vec<Endpoint> =
        (0..3).map(|_| router.route(&request("base"), 1_010, &mut ledger).unwrap().endpoints[0]).collect();
    assert_eq!(firsts[..2], [ep(3), ep(3)], "{firsts:?}");
    assert_ne!(firsts[2], ep(1), "pod 1, busiest fleet-wide, is left alone");
}

#[test]
fn other_replicas_requests_at_adoption_are_not_counted_as_sent_since_the_scrape() {
    // The scrape says pod 1 runs 4: the other replicas' 4 requests there. Counting them
    // again as sent since the scrape would predict a queue that is not there.
    let busy = |port, running: f64| {
        PodState::scraped(
            ep(port),
            1_000,
            PodSignals { waiting: Some(0.0), running: Some(running), kv_cache_usage: Some(0.2), ..Default::default() },
        )
    };
    let mut snap = snapshot("a", vec![busy(1, 4.0)]);
    snap.peers.load = vec![crate::replicas::PeerLoad { pod: ep(1), in_flight: 4, pending_prefill_tokens: 0 }];
    let mut router = Router::new(config(), 1);
    let mut ledger = LocalLedger::default();
    router.apply_snapshot(snap, &ledger);
    let d = router.route(&request("base"), 1_010, &mut ledger).unwrap();
    assert_eq!(d.chosen.waiting, 0.0, "the peers' requests are in the scrape's running count, not waiting");
}

#[test]
fn an_adapter_queued_behind_full_slots_is_blocked_not_about_to_load() {
    let adapter_on = |pod: PodState| {
        let (mut router, mut ledger) = router_with(vec![pod]);
        router.route(&request("lora"), 1_010, &mut ledger).unwrap().chosen.adapter
    };
    assert_eq!(adapter_on(lora_pod(1, 1.0, &["x", "y"], &["sql"])), crate::scoring::AdapterState::Blocked);
    assert_eq!(adapter_on(lora_pod(1, 1.0, &["x"], &["sql"])), crate::scoring::AdapterState::Waiting);
}

fn lora_pod(port: u16, waiting: f64, running: &[&str], waiting_adapters: &[&str]) -> PodState {
    let signals = PodSignals {
        waiting: Some(waiting),
        running: Some(4.0),
        kv_cache_usage: Some(0.1),
        running_adapters: running.iter().map(|a| a.to_string()).collect(),
        waiting_adapters: waiting_adapters.iter().map(|a| a.to_string()).collect(),
        max_loras: Some(2),
        ..Default::default()
    };
    PodState::scraped(ep(port), 1_000, signals)
}

#[test]
fn a_duplicate_copy_where_another_adapter_starves_gets_no_more_requests() {
    // "sql" runs on both pods; on pod 2, "d" waits for a slot that "sql" and "c" hold.
    // Pod 2 has the shorter queue, but feeding its copy of "sql" would starve "d".
    let (mut router, mut ledger) =
        router_with(vec![lora_pod(1, 3.0, &["sql", "b"], &[]), lora_pod(2, 1.0, &["sql", "c"], &["d"])]);
    let d = router.route(&request("lora"), 1_010, &mut ledger).unwrap();
    assert_eq!(d.endpoints[0], ep(1), "{d:?}");
    assert_eq!(d.runner_up.map(|r| r.adapter), Some(crate::scoring::AdapterState::Surplus));
    // Without a starving adapter, the shorter queue wins as before.
    let (mut router, mut ledger) =
        router_with(vec![lora_pod(1, 3.0, &["sql", "b"], &[]), lora_pod(2, 1.0, &["sql", "c"], &[])]);
    assert_eq!(router.route(&request("lora"), 1_010, &mut ledger).unwrap().endpoints[0], ep(2));
}

#[test]
fn an_adapter_with_no_slot_goes_where_a_duplicate_is_draining() {
    // Every slot serves running requests. On pod 2, "x" is a duplicate being drained for
    // "w": a slot frees there. On pod 1 nothing will free one while "x" and "y" are fed.
    let (mut router, mut ledger) =
        router_with(vec![lora_pod(1, 0.0, &["x", "y"], &[]), lora_pod(2, 3.0, &["x", "z"], &["w"])]);
    let d = router.route(&request("lora"), 1_010, &mut ledger).unwrap();
    assert_eq!((d.endpoints[0], d.chosen.adapter), (ep(2), crate::scoring::AdapterState::Freeing), "{d:?}");
    assert_eq!(d.runner_up.map(|r| r.adapter), Some(crate::scoring::AdapterState::Blocked));
}

#[test]
fn a_second_copy_of_an_adapter_is_priced_only_when_slots_are_scarce() {
    // "sql" runs on pod 1 behind a queue of 3; pod 2 has a free slot. With three adapters
    // for four slots, loading "sql" there costs one load and wins. With a fourth adapter
    // waiting (on pod 1, for a slot), a second copy would take the slot it needs: "sql"
    // stays on pod 1.
    let second = |pod1_waiting: &[&str]| {
        let pods = vec![lora_pod(1, 3.0, &["sql", "c"], pod1_waiting), lora_pod(2, 0.0, &["d"], &[])];
        let (mut router, mut ledger) = router_with(pods);
        let d = router.route(&request("lora"), 1_010, &mut ledger).unwrap();
        (d.endpoints[0], d.runner_up.map(|r| r.adapter))
    };
    assert_eq!(second(&[]).0, ep(2));
    assert_eq!(second(&["e"]), (ep(1), Some(crate::scoring::AdapterState::Duplicate)));
}

#[test]
fn a_slot_claimed_by_a_waiting_adapter_is_not_free() {
    // Two slots per pod. On pod 2, "d" runs and "e" waits to load into the other slot:
    // "sql" would wait there until "d" or "e" drains, though pod 2 is idle and pod 1
    // has a queue of 3. Where the waiting adapter also runs, it claims no slot.
    let chosen = |pod2_waiting: &[&str]| {
        let pods = vec![lora_pod(1, 3.0, &["b"], &[]), lora_pod(2, 0.0, &["d"], pod2_waiting)];
        let (mut router, mut ledger) = router_with(pods);
        let d = router.route(&request("lora"), 1_010, &mut ledger).unwrap();
        let pod2 = if d.endpoints[0] == ep(2) { Some(d.chosen.adapter) } else { d.runner_up.map(|r| r.adapter) };
        (d.endpoints[0], pod2)
    };
    assert_eq!(chosen(&["e"]), (ep(1), Some(crate::scoring::AdapterState::Blocked)));
    assert_eq!(chosen(&["d"]), (ep(2), Some(crate::scoring::AdapterState::FreeSlot)));
    assert_eq!(chosen(&[]), (ep(2), Some(crate::scoring::AdapterState::FreeSlot)));
}

#[test]
fn with_several_replicas_a_pods_unseen_arrivals_count_once_per_replica() {
    // Pod 1 idle, pod 2 with two queued. Alone, a replica sends two requests to pod 1
    // before it looks worse than pod 2; with three replicas routing on the same
    // snapshot, its first request there stands for three, and the second goes to pod 2.
    let second_pod = |replicas: u32| {
        let mut snap = snapshot("a", vec![pod(1, 0.0, 0.1, 1_000), pod(2, 2.0, 0.1, 1_000)]);
        snap.peers.replicas = replicas;
        let mut router = Router::new(config(), 1);
        let mut ledger = LocalLedger::default();
        router.apply_snapshot(snap, &ledger);
        let first = router.route(&request("base"), 1_010, &mut ledger).unwrap().endpoints[0];
        let second = router.route(&request("base"), 1_020, &mut ledger).unwrap().endpoints[0];
        (first, second)
    };
    assert_eq!(second_pod(1), (ep(1), ep(1)));
    assert_eq!(second_pod(3), (ep(1), ep(2)));
}

#[test]
fn under_flow_control_a_saturated_pool_holds_every_band_and_counts_none() {
    let flow = FlowControlSettings { enabled: true, ..Default::default() };
    let saturated = vec![pod(1, 6.0, 0.5, 1_000), pod(2, 0.0, 0.9, 1_000), pod(3, 8.0, 0.9, 1_000)];
    let mut routing = config();
    routing.models[0].criticality = Criticality::Critical;
    let mut router = Router::new(routing.clone(), 1);
    let mut ledger = LocalLedger::default();
    let mut snap = snapshot("a", saturated);
    snap.routing = routing;
    router.apply_snapshot(snap, &ledger);
    for criticality in [Criticality::Sheddable, Criticality::Standard, Criticality::Critical] {
        let request = InferenceRequest { criticality: Some(criticality), ..request("base") };
        match router.route_or_hold(&request, 1_010, &mut ledger, &flow).unwrap() {
            Routing::Hold { pool, band, predicted_ttft_ms } => {
                assert_eq!((pool.as_str(), band, predicted_ttft_ms), ("a", criticality, None));
            }
            Routing::Routed(d) => panic!("{criticality:?} routed to {}", d.chosen.endpoint),
        }
    }
    for pod in 1..=3 {
        assert_eq!(ledger.load(ep(pod)), PodLoad::default(), "a held request is counted nowhere");
    }
    let (mut router, mut ledger) =
        router_with(vec![pod(1, 6.0, 0.5, 1_000), pod(2, 0.0, 0.3, 1_000), pod(3, 8.0, 0.9, 1_000)]);
    let Routing::Routed(decision) = router.route_or_hold(&request("base"), 1_010, &mut ledger, &flow).unwrap() else {
        panic!("pod 2 has room")
    };
    assert_eq!(decision.chosen.endpoint, ep(2));
    assert_eq!(ledger.load(ep(2)).in_flight, 1);
}

#[test]
fn a_band_with_a_ttft_limit_is_held_while_the_best_prediction_exceeds_it() {
    let mut flow = FlowControlSettings { enabled: true, ..Default::default() };
    flow.bands.standard.max_engine_waiting = Some(5.0);
    flow.bands.critical.max_engine_waiting = Some(5.0);
    let busy = vec![pod(1, 3.0, 0.5, 1_000), pod(2, 3.0, 0.5, 1_000), pod(3, 3.0, 0.5, 1_000)];
    let mut routing = config();
    routing.models[0].criticality = Criticality::Critical;
    let mut router = Router::new(routing.clone(), 1);
    let mut ledger = LocalLedger::default();
    let mut snap = snapshot("a", busy);
    snap.routing = routing;
    router.apply_snapshot(snap, &ledger);
    let standard = InferenceRequest { criticality: Some(Criticality::Standard), ..request("base") };
    let Routing::Routed(decision) = router.route_or_hold(&standard, 1_010, &mut ledger, &flow).unwrap() else {
        panic!("not saturated and no limit: routed")
    };
    let predicted = decision.chosen.ttft.ttft_ms;
    router.release(decision.chosen.endpoint, decision.pending_prefill_tokens, &mut ledger);
    flow.bands.standard.hold_above_ttft_ms = Some(predicted * 0.5);
    match router.route_or_hold(&standard, 1_010, &mut ledger, &flow).unwrap() {
        Routing::Hold { predicted_ttft_ms: Some(ms), .. } => assert!(ms > predicted * 0.5, "{ms} vs {predicted}"),
        other => panic!("expected a hold with its prediction, got {other:?}"),
    }
    assert!(
        matches!(router.route_or_hold(&request("base"), 1_010, &mut ledger, &flow).unwrap(), Routing::Routed(_)),
        "the limit is the standard band's only"
    );
}

#[test]
fn under_flow_control_a_pod_is_full_once_its_engine_has_max_engine_waiting_queued() {
    let two_waiting = || vec![pod(1, 2.0, 0.3, 1_000), pod(2, 2.0, 0.3, 1_000), pod(3, 2.0, 0.3, 1_000)];
    let (mut router, mut ledger) = router_with(two_waiting());
    let sheddable = InferenceRequest { criticality: Some(Criticality::Sheddable), ..request("base") };
    assert!(router.route(&sheddable, 1_010, &mut ledger).is_ok(), "below admission's threshold of 5");
    let (mut router, mut ledger) = router_with(two_waiting());
    let flow = FlowControlSettings { enabled: true, ..Default::default() };
    assert_eq!(flow.band(Criticality::Standard).max_engine_waiting, 1.0);
    assert!(matches!(router.route_or_hold(&request("base"), 1_010, &mut ledger, &flow).unwrap(), Routing::Hold { .. }));
    let mut roomier = flow.clone();
    roomier.bands.standard.max_engine_waiting = Some(3.0);
    for _ in 0..3 {
        assert!(matches!(
            router.route_or_hold(&request("base"), 1_010, &mut ledger, &roomier).unwrap(),
            Routing::Routed(_)
        ));
    }
    // Each pod now has the one this gateway sent beside its two: all full.
    assert!(matches!(
        router.route_or_hold(&request("base"), 1_010, &mut ledger, &roomier).unwrap(),
        Routing::Hold { .. }
    ));
}

#[test]
fn a_subset_hint_limits_the_choice_and_an_empty_one_is_a_503() {
    let mut router = Router::new(config(), 1);
    let mut ledger = LocalLedger::default();
    for _ in 0..6 {
        let decision = router.route_within(&request("base"), 0, &mut ledger, Some(&[ep(2), ep(7)])).unwrap();
        assert_eq!(decision.endpoints, vec![ep(2)], "only pod 2 of the pool is in the subset");
    }
    let refused = router.route_within(&request("base"), 0, &mut ledger, Some(&[ep(7)])).unwrap_err();
    assert_eq!((refused.status, refused.code), (503, "no_ready_endpoint"));
    assert!(router.route_within(&request("base"), 0, &mut ledger, None).is_ok());
}

#[test]
fn replicas_given_the_same_snapshot_start_simultaneous_requests_on_different_pods() {
    // Six idle pods, three replicas routing one request each on the same snapshot: each
    // starts it in its own share, so no pod gets two, whatever their random tie-breaks
    // (without the shares, 44% of rounds would put two on one pod).
    for seed in 0..20 {
        let chosen: Vec<Endpoint> = (0..3)
            .map(|index| {
                let pods = (1..=6).map(|port| pod(port, 0.0, 0.1, 1_000)).collect();
                let mut snap = snapshot("a", pods);
                snap.peers.replicas = 3;
                snap.peers.index = Some(index);
                let mut router = Router::new(config(), seed * 3 + u64::from(index));
                let mut ledger = LocalLedger::default();
                router.apply_snapshot(snap, &ledger);
                router.route(&request("base"), 1_010, &mut ledger).unwrap().endpoints[0]
            })
            .collect();
        let mut distinct = chosen.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 3, "round {seed}: {chosen:?}");
    }
}

#[test]
fn pushed_peer_load_counts_the_others_sends_as_they_are() {
    // Pod 1 idle, pod 2 with two queued, three replicas. Without the load exchange a
    // replica's own send to pod 1 stands for three (the guess of the test above) and its
    // next request goes to pod 2. With the others' load pushed and showing nothing on
    // pod 1, the guess is gone: the next goes to pod 1 again. Once the push shows two
    // other requests sent to pod 1 since the snapshot, pod 2 is cheaper.
    let pushed_second = |peer_on_1: u32| {
        let mut snap = snapshot("a", vec![pod(1, 0.0, 0.1, 1_000), pod(2, 2.0, 0.1, 1_000)]);
        snap.peers.replicas = 3;
        let mut router = Router::new(config(), 1);
        let mut ledger = LocalLedger::default();
        router.apply_snapshot(snap, &ledger);
        router.adopt_peer_load(&[], 1_005);
        let first = router.route(&request("base"), 1_010, &mut ledger).unwrap().endpoints[0];
        let load = [crate::replicas::PeerLoad { pod: ep(1), in_flight: peer_on_1, pending_prefill_tokens: 0 }];
        router.adopt_peer_load(&load, 1_012);
        let second = router.route(&request("base"), 1_015, &mut ledger).unwrap().endpoints[0];
        (first, second)
    };
    assert_eq!(pushed_second(0), (ep(1), ep(1)));
    assert_eq!(pushed_second(2), (ep(1), ep(2)));
}

#[test]
fn a_fresh_load_push_halves_the_price_of_the_other_replicas_shares() {
    // Two pods, two replicas: this replica's own pod has `waiting` queued, the other's
    // is idle. Idle, it keeps to its own pod whether the others' load is pushed or not
    // (requests arriving together still start apart); some queues are worth crossing
    // to the other share only while the push is fresh, and none the other way round.
    // PEER_LOAD_MAX_AGE_MS after the last push, the full price is back.
    let prompt = "a long question about the fleet ".repeat(120);
    let stays_home = |waiting: f64, pushed_at_ms: u64| {
        let mut snap = snapshot("a", vec![pod(1, 0.0, 0.1, 1_000), pod(2, 0.0, 0.1, 1_000)]);
        snap.peers.replicas = 2;
        snap.peers.index = Some(0);
        let shares = crate::scoring::OtherShares::deal(&snap.pools, snap.peers.place());
        let home = if shares.contains("a", ep(1)) { 1 } else { 0 };
        if let Some(own) = snap.pools[0].pods.get_mut(home) {
            *own = pod(own.address.socket_addr().port(), waiting, 0.1, 1_000);
        }
        let mut router = Router::new(config(), 1);
        let mut ledger = LocalLedger::default();
        router.apply_snapshot(snap, &ledger);
        router.adopt_peer_load(&[], pushed_at_ms);
        let chosen = router.route(&chat("base", &prompt), 1_010, &mut ledger).unwrap().endpoints[0];
        !shares.contains("a", chosen)
    };
    let (fresh, stale) = (1_005, 1_009 - PEER_LOAD_MAX_AGE_MS);
    assert!(stays_home(0.0, fresh) && stays_home(0.0, stale));
    let queues: Vec<f64> = (1..60).map(f64::from).collect();
    assert!(queues.iter().all(|&w| !stays_home(w, fresh) || stays_home(w, stale)));
    assert!(queues.iter().any(|&w| !stays_home(w, fresh) && stays_home(w, stale)), "no queue priced differently");
}

#[test]
fn a_burst_keeps_each_replica_to_its_own_share() {
    // Eight idle pods, two replicas, four pods each. A burst of eight requests reaches
    // this replica at one instant, and as many the other, which this one cannot see
    // until the next push: it assumes the other sent to its own pods what this one
    // sent to its own, and keeps to its own four, two requests each, where without the
    // guess its last four would go to the other's pods, which the other fills too.
    let ports: Vec<u16> = (11..=18).collect();
    let burst = |guess: bool| {
        let mut snap = snapshot("wide", ports.iter().map(|&p| pod(p, 0.0, 0.1, 1_000)).collect());
        snap.peers.replicas = 2;
        snap.peers.index = Some(0);
        let shares = crate::scoring::OtherShares::deal(&snap.pools, snap.peers.place());
        let mut router = Router::new(config(), 1);
        let mut ledger = LocalLedger::default();
        router.apply_snapshot(snap, &ledger);
        let mut per_pod: HashMap<Endpoint, u32> = HashMap::new();
        for i in 0..8 {
            // Without the guess, a push before each request (too soon to show the other's).
            if !guess || i == 0 {
                router.adopt_peer_load(&[], 1_008);
            }
            let d = router.route(&chat("wide", &format!("question {i} ").repeat(100)), 1_010, &mut ledger).unwrap();
            *per_pod.entry(d.endpoints[0]).or_default() += 1;
        }
        let theirs: u32 = per_pod.iter().filter(|(pod, _)| shares.contains("wide", **pod)).map(|(_, n)| n).sum();
        (theirs, per_pod.values().copied().max().unwrap_or(0))
    };
    assert_eq!(burst(true), (0, 2), "all on its own share, two a pod");
    assert!(burst(false).0 > 0, "without the guess some go to the other's share");
}

#[test]
fn while_load_pushes_are_fresh_a_snapshot_keeps_the_pushed_view_of_the_others() {
    // A snapshot's view of the others is their answers to the agent's previous round,
    // a scrape interval older than the snapshot: while pushes come, theirs is newer.
    let mut snap = snapshot("a", vec![pod(1, 0.0, 0.1, 1_000), pod(2, 0.0, 0.1, 1_000)]);
    snap.peers.replicas = 2;
    snap.peers.load = vec![crate::replicas::PeerLoad { pod: ep(1), in_flight: 9, pending_prefill_tokens: 0 }];
    let mut router = Router::new(config(), 1);
    let mut ledger = LocalLedger::default();
    router.adopt_peer_load(&[crate::replicas::PeerLoad { pod: ep(2), in_flight: 3, pending_prefill_tokens: 0 }], 990);
    snap.created_at_ms = 1_000;
    router.apply_snapshot(snap.clone(), &ledger);
    let d = router.route(&request("base"), 1_005, &mut ledger).unwrap();
    assert_eq!(d.endpoints[0], ep(1), "the snapshot's view of the peers replaced a fresh push's");
    // The pushes stopped: the next snapshot's view is the newest there is.
    snap.created_at_ms = 990 + PEER_LOAD_MAX_AGE_MS + 1;
    router.apply_snapshot(snap, &ledger);
    let d = router.route(&request("base"), 1_250, &mut ledger).unwrap();
    assert_eq!(d.endpoints[0], ep(2), "the snapshot's view of the peers was not taken after the pushes stopped");
}

/// Two pods with two LoRA slots, one free on each ("b" runs on pod 1, "d" on pod 2);
/// pod 1 has the shorter queue. "lora" asks for adapter "sql", "lora-chat" for "chat".
fn one_free_slot_each() -> Snapshot {
    let mut snap = snapshot("a", vec![lora_pod(1, 0.0, &["b"], &[]), lora_pod(2, 3.0, &["d"], &[])]);
    snap.routing.models.push(ModelConfig {
        name: "lora-chat".into(),
        pool: "a".into(),
        adapter: Some("chat".into()),
        criticality: Default::default(),
    });
    snap
}

/// The next snapshot, `sequence`, with every pod scraped at `at_ms`.
fn rescraped(snap: &mut Snapshot, sequence: u64, at_ms: u64) {
    snap.sequence = sequence;
    for pod in snap.pools.iter_mut().flat_map(|pool| &mut pool.pods) {
        pod.scraped_at_ms = Some(at_ms);
    }
}

#[test]
fn an_adapter_sent_after_the_scrape_claims_its_slot() {
    // Two slots per pod, one free on each; pod 1 has the shorter queue. "sql" is sent
    // there. Until the next snapshot lists it, a request for "chat" finds that slot
    // claimed and goes to pod 2; another "sql" request finds it loading on pod 1.
    let mut snap = one_free_slot_each();
    let mut router = Router::new(config(), 1);
    let mut ledger = LocalLedger::default();
    router.apply_snapshot(snap.clone(), &ledger);
    let sql = router.route(&request("lora"), 1_010, &mut ledger).unwrap();
    assert_eq!((sql.endpoints[0], sql.chosen.adapter), (ep(1), crate::scoring::AdapterState::FreeSlot));
    let again = router.route(&request("lora"), 1_011, &mut ledger).unwrap();
    assert_eq!((again.endpoints[0], again.chosen.adapter), (ep(1), crate::scoring::AdapterState::Waiting));
    let chat = router.route(&request("lora-chat"), 1_012, &mut ledger).unwrap();
    assert_eq!((chat.endpoints[0], chat.chosen.adapter), (ep(2), crate::scoring::AdapterState::FreeSlot), "{chat:?}");
    // A new snapshot whose scrapes predate the sends cannot show them: the claim stays.
    snap.sequence = 2;
    router.apply_snapshot(snap.clone(), &ledger);
    let before = router.route(&request("lora-chat"), 1_013, &mut ledger).unwrap();
    assert_eq!(before.endpoints[0], ep(2), "{before:?}");
    // Nor can one scraped right after them: the requests may not have reached the pod.
    rescraped(&mut snap, 3, 1_020);
    router.apply_snapshot(snap.clone(), &ledger);
    let in_transit = router.route(&request("lora-chat"), 1_021, &mut ledger).unwrap();
    assert_eq!(in_transit.endpoints[0], ep(2), "{in_transit:?}");
    // One scraped well after them shows what the pod holds (here, the same lists: the
    // "sql" requests finished).
    rescraped(&mut snap, 4, 1_400);
    router.apply_snapshot(snap, &ledger);
    let after = router.route(&request("lora-chat"), 1_401, &mut ledger).unwrap();
    assert_eq!(
        (after.endpoints[0], after.chosen.adapter),
        (ep(1), crate::scoring::AdapterState::FreeSlot),
        "{after:?}"
    );
}

#[test]
fn an_adapter_another_worker_sent_claims_its_slot_here_too() {
    // Two workers' routers on one snapshot: pod 1 has the shorter queue and one free
    // slot. Worker A sends "sql" there; its record reaches worker B, whose "chat"
    // request then finds the slot claimed and goes to pod 2. Without the record, B
    // sends "chat" to pod 1 as well.
    let snap = one_free_slot_each();
    let mut ledger = LocalLedger::default();
    let mut worker_a = Router::new(config(), 1);
    worker_a.apply_snapshot(snap.clone(), &ledger);
    let sql = worker_a.route(&request("lora"), 1_010, &mut ledger).unwrap();
    assert_eq!(sql.endpoints[0], ep(1));
    let load = sql.adapter_load.clone().expect("a load was started");
    assert_eq!((load.adapter.as_str(), load.sent_at_ms), ("sql", 1_010));
    let record = PrefixRecord { adapter_load: Some(load), ..PrefixRecord::of_chain(ep(1), &sql.prefix) };

    let fresh_ledger = LocalLedger::default;
    let route_chat = |peer: Option<&PrefixRecord>| {
        let mut worker_b = Router::new(config(), 2);
        let mut ledger = fresh_ledger();
        worker_b.apply_snapshot(snap.clone(), &ledger);
        if let Some(record) = peer {
            worker_b.record_peer(record);
        }
        worker_b.route(&request("lora-chat"), 1_015, &mut ledger).unwrap()
    };
    assert_eq!(route_chat(None).endpoints[0], ep(1), "alone, B sees the free slot");
    let chat = route_chat(Some(&record));
    assert_eq!((chat.endpoints[0], chat.chosen.adapter), (ep(2), crate::scoring::AdapterState::FreeSlot), "{chat:?}");
    // A request for a running adapter starts no load, and says so.
    assert!(worker_a.route(&request("lora"), 1_020, &mut ledger).unwrap().adapter_load.is_none());
}
