//! The calibration plan's two departures from a plain fleet: pods whose metrics lie by
//! a factor, and a pod that joins under way.

use infergate_model_sim::engine::EngineProfile;

use super::*;
use crate::fleet::{FleetConfig, ScrapeView};
use crate::policies::{self, PickContext};
use crate::request::{Arrival, BenchRequest, render, text};
use crate::workloads::{BASE_MODEL, CalibrationPlan};

/// `count` requests of about 1,000 prompt tokens, one every `gap_s`.
fn requests(count: usize, gap_s: f64) -> Vec<BenchRequest> {
    let mut rng = fastrand::Rng::with_seed(5);
    (0..count)
        .map(|i| BenchRequest {
            arrival: Arrival::At(i as f64 * gap_s),
            model: BASE_MODEL.into(),
            adapter: None,
            prompt: render(&[("user", &text(&mut rng, 4_000))]).into(),
            output_tokens: 20,
            session: None,
        })
        .collect()
}

fn scenario(pods: usize, requests: Vec<BenchRequest>, calibration: CalibrationPlan) -> Scenario {
    let duration_s = match requests.last().map(|r| r.arrival) {
        Some(Arrival::At(t)) => t + 1.0,
        _ => 1.0,
    };
    Scenario {
        pods,
        profile: EngineProfile::LLAMA_3_1_8B_H100,
        adapters: Vec::new(),
        requests,
        duration_s,
        calibration,
    }
}

/// A policy wrapped to keep, per scrape, its time, the snapshot's pods and pod 0's
/// learned prefill rate.
struct Recorder {
    inner: Box<dyn Policy>,
    scrapes: Vec<(f64, usize, Option<f64>)>,
}

impl Recorder {
    fn new(name: &str, pods: usize) -> Self {
        let fleet = FleetConfig::new(pods, &[]);
        Self { inner: policies::build(name, pods, 1, &fleet).unwrap(), scrapes: Vec::new() }
    }
}

impl Policy for Recorder {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        self.inner.pick(ctx)
    }
    fn on_scrape(&mut self, scrape: &ScrapeView, now: f64) {
        let pods = &scrape.snapshot.pools[0].pods;
        let rate = pods[0].signals.as_ref().and_then(|s| s.prefill_tokens_per_s);
        self.scrapes.push((now, pods.len(), rate));
        self.inner.on_scrape(scrape, now);
    }
    fn on_first_token(&mut self, id: usize, pod: usize, request: &BenchRequest, at: f64) {
        self.inner.on_first_token(id, pod, request, at);
    }
    fn on_finish(&mut self, id: usize, pod: usize) {
        self.inner.on_finish(id, pod);
    }
}

/// Pod 0's learned prefill rate in the last scrape of a one-pod fleet reporting at `scale`.
fn learned_rate(scale: f64) -> f64 {
    let plan = CalibrationPlan { reporting_time_scale: scale, ..CalibrationPlan::NONE };
    let mut recorder = Recorder::new("round_robin", 1);
    run_outcomes(&scenario(1, requests(40, 0.5), plan), &mut recorder);
    recorder.scrapes.iter().rev().find_map(|(_, _, rate)| *rate).unwrap()
}

#[test]
fn a_pod_reporting_its_times_ten_times_short_is_learned_ten_times_faster() {
    let truthful = learned_rate(1.0);
    let lying = learned_rate(0.1);
    // 1,000 tokens at 20,000 tokens/s plus the step: a little under the profile's rate.
    assert!(truthful > 15_000.0 && truthful <= 20_000.0, "{truthful}");
    assert!((lying / truthful - 10.0).abs() < 1e-6, "{lying} vs {truthful}");
    assert!((learned_rate(3.0) * 3.0 / truthful - 1.0).abs() < 1e-6);
}

#[test]
fn a_joining_pod_gets_no_request_and_is_in_no_snapshot_before_its_time() {
    let join_at = 2.0;
    let plan = CalibrationPlan { join_at_s: vec![join_at], ..CalibrationPlan::NONE };
    // 50 prompts of 1,000 tokens a second: more than two pods prefill, so all need the third.
    let scenario = scenario(3, requests(200, 0.02), plan);
    for name in ["round_robin", "least_request", "dynamo_kv", "infergate"] {
        let mut recorder = Recorder::new(name, 3);
        let (outcomes, engines) = run_outcomes(&scenario, &mut recorder);
        assert!(outcomes.iter().filter(|o| o.arrival < join_at).all(|o| o.pod < 2), "{name}");
        assert!(outcomes.iter().any(|o| o.pod == 2), "{name}: the new pod serves after it joins");
        assert!(recorder.scrapes.iter().all(|&(t, pods, _)| pods == if t < join_at { 2 } else { 3 }), "{name}");
        assert_eq!(engines.len(), 3);
    }
}

#[test]
fn joiners_are_the_last_pods_and_join_in_turn() {
    let plan = CalibrationPlan { join_at_s: vec![5.0, 3.0, f64::NAN], ..CalibrationPlan::NONE };
    assert_eq!(plan.present(5, 0.0), 2);
    assert_eq!(plan.present(5, 4.0), 2, "the second joiner waits for the first");
    assert_eq!(plan.present(5, 5.0), 4);
    assert_eq!(plan.present(5, 1e9), 4, "a join time that is not a number never comes");
    assert_eq!(CalibrationPlan::NONE.present(5, 0.0), 5);
}
