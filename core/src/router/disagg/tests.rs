use super::*;
use crate::config::{Disaggregation, ModelConfig, PodRole, PoolConfig, RoutingConfig, RoutingSettings, SplitPolicy};
use crate::request::InferenceRequest;
use crate::router::{LoadLedger, LocalLedger, Router};
use crate::scoring::{AdapterState, TtftBreakdown};
use crate::snapshot::{PodSignals, PodState, PoolState, SNAPSHOT_VERSION, Snapshot};

fn ep(port: u16) -> Endpoint {
    Endpoint::new(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
}

/// A decode pod's report; see [`prefill_report`] for a prefill pod's.
fn report(port: u16, running: f64, cached_tokens: f64, prefill_ms: f64, queue_ms: f64) -> PodReport {
    let step_ms = 20.0;
    PodReport {
        endpoint: ep(port),
        total: 0.0,
        waiting: 0.0,
        running,
        kv_cache_usage: Some(0.2),
        matched_blocks: 0,
        cached_tokens,
        adapter: AdapterState::NotNeeded,
        role: PodRole::Decode,
        ttft: TtftBreakdown {
            queue_ms,
            kv_wait_ms: 0.0,
            prefill_ms: prefill_ms + step_ms,
            step_ms,
            itl_ms: step_ms,
            adapter_ms: 0.0,
            decode_ms: 0.0,
            penalty_ms: 0.0,
            impact_ms: 0.0,
            resident_ms: 0.0,
            evict_ms: 0.0,
            ttft_ms: queue_ms + prefill_ms + step_ms,
            total_ms: queue_ms + prefill_ms + step_ms,
        },
    }
}

/// A prefill-only pod's report.
fn prefill_report(port: u16, running: f64, cached_tokens: f64, prefill_ms: f64, queue_ms: f64) -> PodReport {
    PodReport { role: PodRole::Prefill, ..report(port, running, cached_tokens, prefill_ms, queue_ms) }
}

#[test]
fn a_long_prompt_to_a_busy_decode_pod_is_split() {
    let settings = Disaggregation::default();
    let decode = report(1, 32.0, 0.0, 400.0, 0.0);
    let prefill = prefill_report(2, 0.0, 0.0, 400.0, 0.0);
    let v = verdict(&settings, 5_000.0, &decode, Some(&prefill));
    assert!(v.split, "{v:?}");
    assert_eq!(v.reason, SplitReason::Gain);
    // 5,000 tokens × 128 KiB at 25 GB/s.
    assert!((v.transfer_ms - 26.2).abs() < 0.1, "{}", v.transfer_ms);
    assert!((v.interference_ms - 32.0 * 400.0).abs() < 1e-6);
}

#[test]
fn a_prefill_pod_that_also_decodes_is_charged_the_stall_it_takes_over() {
    // The decode pod's one running request would be stalled 400 ms; so would the two
    // whole requests a pod of role both runs: splitting there spares nothing.
    let decode = report(1, 1.0, 0.0, 400.0, 0.0);
    let prefill_only = prefill_report(2, 2.0, 0.0, 400.0, 0.0);
    let v = verdict(&Disaggregation::default(), 5_000.0, &decode, Some(&prefill_only));
    assert_eq!((v.split, v.reason, v.leg_interference_ms), (true, SplitReason::Gain, 0.0), "{v:?}");
    let both = PodReport { role: PodRole::Both, ..prefill_only };
    let v = verdict(&Disaggregation::default(), 5_000.0, &decode, Some(&both));
    assert_eq!((v.split, v.reason), (false, SplitReason::NoGain), "{v:?}");
    assert!((v.leg_interference_ms - 2.0 * 400.0).abs() < 1e-6, "{v:?}");
    // An idle pod of role both stalls nothing: the split stands.
    let idle_both = PodReport { running: 0.0, ..both };
    assert_eq!(verdict(&Disaggregation::default(), 5_000.0, &decode, Some(&idle_both)).reason, SplitReason::Gain);
}

#[test]
fn an_idle_decode_pod_serves_the_request_whole() {
    let decode = report(1, 0.0, 0.0, 400.0, 0.0);
    let prefill = prefill_report(2, 0.0, 0.0, 400.0, 0.0);
    let v = verdict(&Disaggregation::default(), 5_000.0, &decode, Some(&prefill));
    assert_eq!((v.split, v.reason), (false, SplitReason::NoGain), "{v:?}");
    assert!(v.split_ttft_ms > v.whole_ttft_ms);
}

#[test]
fn a_prompt_the_decode_pod_mostly_holds_is_not_split() {
    let decode = report(1, 32.0, 4_900.0, 10.0, 0.0);
    let prefill = prefill_report(2, 0.0, 0.0, 400.0, 0.0);
    let v = verdict(&Disaggregation::default(), 5_000.0, &decode, Some(&prefill));
    assert_eq!((v.split, v.reason), (false, SplitReason::ShortPrompt), "{v:?}");
    assert_eq!(v.uncached_tokens, 100.0);
}

#[test]
fn a_queued_prefill_pod_loses_to_a_quiet_decode_pod() {
    // 400 ms queued on the prefill pod cost more than one decode's stall.
    let decode = report(1, 1.0, 0.0, 100.0, 0.0);
    let prefill = prefill_report(2, 0.0, 0.0, 100.0, 400.0);
    let v = verdict(&Disaggregation::default(), 1_500.0, &decode, Some(&prefill));
    assert_eq!((v.split, v.reason), (false, SplitReason::NoGain), "{v:?}");
}

/// `report` with the pod's engine step at `step_ms`.
fn stepping(mut r: PodReport, step_ms: f64) -> PodReport {
    let own = r.ttft.prefill_ms - r.ttft.step_ms;
    r.ttft.step_ms = step_ms;
    r.ttft.itl_ms = step_ms;
    r.ttft.prefill_ms = own + step_ms;
    r.ttft.ttft_ms = r.ttft.queue_ms + r.ttft.prefill_ms;
    r
}

#[test]
fn prefill_pods_queued_past_the_ttft_target_send_a_prompt_whole_to_a_decode_pod_with_room() {
    // The prefill pod's 2 s queue is past 30% of the 2 s target; the decode pod steps
    // in 20 ms (under half the 50 ms ITL target) and our prefill there is 100 ms.
    let decode = report(1, 32.0, 0.0, 100.0, 0.0);
    let prefill = prefill_report(2, 0.0, 0.0, 100.0, 2_000.0);
    let v = verdict(&Disaggregation::default(), 1_500.0, &decode, Some(&prefill));
    assert_eq!((v.split, v.reason), (false, SplitReason::PrefillQueue), "{v:?}");
    // Summed latency alone would split it: 32 decodes stalled 100 ms each.
    assert!(v.split_ttft_ms < v.whole_ttft_ms + v.interference_ms, "{v:?}");

    // A looser target keeps the prefill pod.
    let loose = Disaggregation { ttft_target_ms: 10_000, ..Disaggregation::default() };
    assert_eq!(verdict(&loose, 1_500.0, &decode, Some(&prefill)).reason, SplitReason::Gain);
    // A decode pod near the ITL target takes no whole prompt.
    let stalling = stepping(decode, 30.0);
    assert_eq!(verdict(&Disaggregation::default(), 1_500.0, &stalling, Some(&prefill)).reason, SplitReason::ItlGuard);
    // Nor does one whose prefill of this prompt would take more than 5 ITL targets.
    let long = report(1, 32.0, 0.0, 300.0, 0.0);
    assert_eq!(verdict(&Disaggregation::default(), 5_000.0, &long, Some(&prefill)).reason, SplitReason::Gain);
}

#[test]
fn the_itl_guard_reads_the_pods_own_step_not_the_ttft_calibrated_one() {
    // The pool's TTFT calibration triples the predicted step to 30 ms, past half the ITL
    // target; the pod's requests see 10 ms between tokens: no ITL at risk.
    let mut decode = stepping(report(1, 0.0, 0.0, 100.0, 0.0), 30.0);
    decode.ttft.itl_ms = 10.0;
    let prefill = prefill_report(2, 0.0, 0.0, 100.0, 100.0);
    let v = verdict(&Disaggregation::default(), 1_500.0, &decode, Some(&prefill));
    assert_eq!((v.split, v.reason), (false, SplitReason::NoGain), "{v:?}");
    decode.ttft.itl_ms = 30.0;
    assert_eq!(verdict(&Disaggregation::default(), 1_500.0, &decode, Some(&prefill)).reason, SplitReason::ItlGuard);
}

#[test]
fn a_stalling_decode_pod_sends_even_a_prompt_that_costs_no_interference_to_prefill() {
    // Nothing runs on the decode pod (no interference to spare), but its steps take
    // 30 ms, past half the ITL target: the prefill pod takes the prompt in time.
    let decode = stepping(report(1, 0.0, 0.0, 100.0, 0.0), 30.0);
    let prefill = prefill_report(2, 0.0, 0.0, 100.0, 100.0);
    let v = verdict(&Disaggregation::default(), 1_500.0, &decode, Some(&prefill));
    assert_eq!((v.split, v.reason), (true, SplitReason::ItlGuard), "{v:?}");
    let mut line = String::new();
    v.describe(None, &mut line);
    assert!(line.contains("pd=split reason=itl-guard"), "{line}");
}

#[test]
fn a_stalling_decode_pod_that_holds_the_prefix_is_not_passed_over_for_a_pod_that_lacks_it() {
    // An agentic turn: the decode pod holds 97,000 of 100,000 tokens (100 ms of
    // prefill); the prefill pod would compute all of them (3 s) behind a queue.
    let decode = stepping(report(1, 8.0, 97_000.0, 100.0, 0.0), 30.0);
    let prefill = prefill_report(2, 0.0, 0.0, 3_000.0, 500.0);
    let v = verdict(&Disaggregation::default(), 100_000.0, &decode, Some(&prefill));
    assert_eq!((v.split, v.reason), (false, SplitReason::NoGain), "{v:?}");
    // When it would compute as little, and queues past 30% of the target, it takes it.
    let holding = prefill_report(2, 0.0, 97_000.0, 120.0, 1_000.0);
    let v = verdict(&Disaggregation::default(), 100_000.0, &decode, Some(&holding));
    assert_eq!((v.split, v.reason), (true, SplitReason::ItlGuard), "{v:?}");
}

#[test]
fn a_stalling_decode_pod_keeps_a_turn_it_serves_in_time_from_a_prefill_pod_queued_past_the_target() {
    // An agentic turn: the decode pod holds all but 400 of 400,000 tokens (60 ms of
    // prefill) and steps in 40 ms, past half the ITL target; the prefill pod holds as
    // much but queues 5 s behind other sessions.
    let decode = stepping(report(1, 2.0, 399_600.0, 60.0, 0.0), 40.0);
    let prefill = prefill_report(2, 0.0, 399_600.0, 60.0, 5_000.0);
    let v = verdict(&Disaggregation::default(), 400_000.0, &decode, Some(&prefill));
    assert_eq!((v.split, v.reason), (false, SplitReason::PrefillQueue), "{v:?}");
    // 2 running requests stalled 60 ms each: 120 ms, within 5 ITL targets.
    assert!((v.interference_ms - 120.0).abs() < 1e-6, "{v:?}");

    // Five running requests stalled 60 ms each (300 ms) are more than 5 ITL targets:
    // the stalling pod sends it to prefill.
    let crowded = stepping(report(1, 5.0, 399_600.0, 60.0, 0.0), 40.0);
    assert_eq!(verdict(&Disaggregation::default(), 400_000.0, &crowded, Some(&prefill)).reason, SplitReason::ItlGuard);
    // A decode pod that would miss the target too does not keep it.
    let late = stepping(report(1, 2.0, 399_600.0, 60.0, 2_500.0), 40.0);
    assert_eq!(verdict(&Disaggregation::default(), 400_000.0, &late, Some(&prefill)).reason, SplitReason::ItlGuard);
    // Nor one the prefill pod beats.
    let quick = prefill_report(2, 0.0, 399_600.0, 60.0, 700.0);
    let slow = stepping(report(1, 2.0, 399_600.0, 60.0, 800.0), 40.0);
    assert_eq!(verdict(&Disaggregation::default(), 400_000.0, &slow, Some(&quick)).reason, SplitReason::ItlGuard);
}

#[test]
fn policies_always_and_never_skip_the_comparison() {
    let decode = report(1, 0.0, 0.0, 1.0, 0.0);
    let prefill = prefill_report(2, 0.0, 0.0, 1.0, 0.0);
    let always = Disaggregation { split: SplitPolicy::Always, ..Default::default() };
    assert_eq!(verdict(&always, 10.0, &decode, Some(&prefill)).reason, SplitReason::Always);
    assert_eq!(verdict(&always, 10.0, &decode, None).reason, SplitReason::NoPrefillPod);
    let never = Disaggregation { split: SplitPolicy::Never, ..Default::default() };
    let busy = report(1, 64.0, 0.0, 900.0, 0.0);
    assert_eq!(verdict(&never, 9_000.0, &busy, Some(&prefill)).reason, SplitReason::Never);
}

// The router's two stages, on a pool of two prefill pods (1, 2), two decode pods (3, 4)
// and one that does both (5).

fn pd_config(split: SplitPolicy) -> RoutingConfig {
    let mut pool = PoolConfig::static_endpoints("pd", (1..=5).map(ep).collect());
    pool.disaggregation = Some(Disaggregation {
        split,
        prefill_endpoints: vec![ep(1), ep(2)],
        decode_endpoints: vec![ep(3), ep(4)],
        ..Default::default()
    });
    RoutingConfig {
        settings: RoutingSettings::default(),
        flow_control: Default::default(),
        pools: vec![pool],
        models: vec![ModelConfig::base("m", "pd")],
    }
}

fn pd_router(split: SplitPolicy, running: [f64; 5]) -> Router {
    pd_router_queued(split, running, [0.0; 5])
}

fn pd_router_queued(split: SplitPolicy, running: [f64; 5], waiting: [f64; 5]) -> Router {
    let config = pd_config(split);
    let pods = (1..=5u16)
        .zip(running.into_iter().zip(waiting))
        .map(|(port, (running, waiting))| {
            let signals = PodSignals {
                waiting: Some(waiting),
                running: Some(running),
                kv_cache_usage: Some(0.1),
                prefill_tokens_per_s: Some(10_000.0),
                decode_step_ms: Some(20.0),
                ..Default::default()
            };
            PodState::scraped(ep(port), 1_000, signals)
        })
        .collect();
    let snapshot = Snapshot {
        version: SNAPSHOT_VERSION,
        sequence: 1,
        created_at_ms: 1_000,
        routing: config.clone(),
        pools: vec![PoolState { name: "pd".into(), pods }],
        peers: Default::default(),
    };
    let mut router = Router::new(config, 7);
    router.apply_snapshot(snapshot, &LocalLedger::default());
    router
}

fn long_prompt(words: usize) -> InferenceRequest {
    let text: String = (0..words).map(|i| format!("w{i} ")).collect();
    InferenceRequest::of_text("m", text.as_bytes(), &RoutingSettings::default().prefix)
}

#[test]
fn a_split_request_decodes_on_a_decode_pod_and_prefills_on_a_prefill_pod() {
    let mut router = pd_router(SplitPolicy::Predicted, [0.0, 0.0, 24.0, 30.0, 40.0]);
    let mut ledger = LocalLedger::default();
    let d = router.route(&long_prompt(4_000), 1_010, &mut ledger).unwrap();
    let leg = d.prefill.as_ref().expect("split");
    assert_eq!(d.split.map(|s| s.reason), Some(SplitReason::Gain), "{}", d.explain());
    assert!([ep(3), ep(4), ep(5)].contains(&d.chosen.endpoint), "{}", d.explain());
    assert!([ep(1), ep(2), ep(5)].contains(&leg.endpoint()), "{}", d.explain());
    assert_ne!(leg.endpoint(), d.chosen.endpoint);
    assert!(d.explain().contains("pd=split reason=gain"), "{}", d.explain());
    assert!(d.explain().contains(&format!("prefill={}", leg.endpoint())), "{}", d.explain());
    // Both pods count the request; the decode pod only its last token's prefill.
    assert_eq!(ledger.load(d.chosen.endpoint).pending_prefill_tokens, 1);
    assert_eq!(ledger.load(leg.endpoint()).in_flight, 1);
    assert!(ledger.load(leg.endpoint()).pending_prefill_tokens > 1_000);
    router.prefill_leg_done(leg, &mut ledger);
    assert_eq!((ledger.load(leg.endpoint()).in_flight, ledger.load(leg.endpoint()).pending_prefill_tokens), (0, 0));
}

#[test]
fn a_prefill_only_pod_never_decodes() {
    // The prefill pods are idle and the decode-capable ones are loaded: still, the
    // decode goes to a pod that decodes.
    let mut router = pd_router(SplitPolicy::Never, [0.0, 0.0, 60.0, 60.0, 60.0]);
    let mut ledger = LocalLedger::default();
    for i in 0..20 {
        let d = router.route(&long_prompt(50 + i), 1_010, &mut ledger).unwrap();
        assert!(![ep(1), ep(2)].contains(&d.chosen.endpoint), "{}", d.explain());
        assert!(d.prefill.is_none());
        assert_eq!(d.split.map(|s| s.reason), Some(SplitReason::Never));
    }
}

#[test]
fn a_short_prompt_is_served_whole() {
    let mut router = pd_router(SplitPolicy::Predicted, [0.0, 0.0, 24.0, 30.0, 40.0]);
    let d = router.route(&long_prompt(20), 1_010, &mut LocalLedger::default()).unwrap();
    assert!(d.prefill.is_none(), "{}", d.explain());
    assert!(d.explain().contains("pd=whole reason=short-prompt"), "{}", d.explain());
}

#[test]
fn a_pool_without_disaggregation_explains_no_split() {
    let mut config = pd_config(SplitPolicy::Always);
    if let Some(pool) = config.pools.first_mut() {
        pool.disaggregation = None;
    }
    let mut router = Router::new(config, 1);
    let d = router.route(&long_prompt(4_000), 0, &mut LocalLedger::default()).unwrap();
    assert!(d.split.is_none() && d.prefill.is_none());
    assert!(!d.explain().contains("pd="));
}

#[test]
fn roles_follow_the_static_lists() {
    let config = pd_config(SplitPolicy::Predicted);
    let pool = config.pools.first().unwrap();
    assert_eq!(pool.role_of(ep(1)), PodRole::Prefill);
    assert_eq!(pool.role_of(ep(4)), PodRole::Decode);
    assert_eq!(pool.role_of(ep(5)), PodRole::Both);
    assert_eq!(PodRole::from_label("prefill-decode"), Some(PodRole::Both));
    assert_eq!(PodRole::from_label("Prefill"), None);
}

#[test]
fn a_split_request_waits_on_its_decode_pod_only_once_its_prefill_leg_is_back() {
    // Pod 3 is the only decode pod with no queue: every request decodes there.
    let mut router = pd_router_queued(SplitPolicy::Always, [0.0, 0.0, 10.0, 10.0, 10.0], [0.0, 0.0, 0.0, 20.0, 20.0]);
    let mut ledger = LocalLedger::default();
    let first = router.route(&long_prompt(4_000), 1_010, &mut ledger).unwrap();
    assert_eq!(first.chosen.endpoint, ep(3), "{}", first.explain());
    // While its prefill leg is out, it counts as running on pod 3, not as queued there.
    let second = router.route(&long_prompt(3_000), 1_020, &mut ledger).unwrap();
    assert_eq!(second.chosen.endpoint, ep(3), "{}", second.explain());
    assert_eq!((second.chosen.waiting, second.chosen.running), (0.0, 11.0), "{}", second.explain());
    // Back, it waits there for its decode to start, as a request sent since the scrape.
    router.prefill_leg_done(first.prefill.as_ref().expect("split"), &mut ledger);
    let third = router.route(&long_prompt(2_000), 1_030, &mut ledger).unwrap();
    assert_eq!(third.chosen.endpoint, ep(3), "{}", third.explain());
    assert_eq!((third.chosen.waiting, third.chosen.running), (1.0, 11.0), "{}", third.explain());
}

#[test]
fn the_router_charges_a_busy_prefill_pod_of_role_both_its_own_stall() {
    // Pod 3 decodes (no queue). With the prefill-only pods 1 and 2 queued, pod 5 (role
    // both, 10 running) is the best prefill pod, and its running requests are charged.
    let running = [0.0, 0.0, 2.0, 10.0, 10.0];
    let mut router = pd_router_queued(SplitPolicy::Predicted, running, [40.0, 40.0, 0.0, 20.0, 1.0]);
    let d = router.route(&long_prompt(4_000), 1_010, &mut LocalLedger::default()).unwrap();
    assert_eq!(d.chosen.endpoint, ep(3), "{}", d.explain());
    let v = d.split.expect("a disaggregated pool");
    assert!(v.leg_interference_ms > 0.0, "{}", d.explain());
    // With them free, the prefill pod is prefill-only, and charged nothing.
    let mut router = pd_router_queued(SplitPolicy::Predicted, running, [0.0, 0.0, 0.0, 20.0, 1.0]);
    let d = router.route(&long_prompt(4_000), 1_010, &mut LocalLedger::default()).unwrap();
    assert_eq!(d.split.map(|v| v.leg_interference_ms), Some(0.0), "{}", d.explain());
}
