//! Each baseline on a tiny hand-made fleet state picks what its published formula says.

use infergate_core::snapshot::PodSignals;
use infergate_model_sim::engine::{Engine, EngineProfile, SimRequest};

use super::*;
use crate::fleet::{FleetConfig, Scraper};
use crate::request::{Arrival, BenchRequest, render};
use crate::workloads::BASE_MODEL;

fn request(prompt: &str) -> BenchRequest {
    BenchRequest {
        arrival: Arrival::At(0.0),
        model: BASE_MODEL.into(),
        adapter: None,
        prompt: render(&[("user", prompt)]),
        output_tokens: 10,
    }
}

fn engines(n: usize) -> Vec<Engine> {
    (0..n).map(|_| Engine::new(EngineProfile::TINY)).collect()
}

/// A scrape whose signals are replaced by hand-made ones.
fn scrape_with(signals: Vec<PodSignals>) -> ScrapeView {
    let engines = engines(signals.len());
    let fleet = FleetConfig::new(signals.len(), &[]);
    let mut view = Scraper::new(signals.len()).scrape(&engines, &fleet, 0.0);
    view.signals = signals.into_iter().map(Some).collect();
    view
}

fn pick(
    policy: &mut dyn Policy,
    req: &BenchRequest,
    engines: &[Engine],
    scrape: &ScrapeView,
    in_flight: &[u32],
) -> usize {
    policy.pick(&PickContext { id: 0, request: req, now: 0.0, engines, scrape, in_flight })
}

fn signals(waiting: f64, kv: f64) -> PodSignals {
    PodSignals { waiting, kv_cache_usage: kv, ..PodSignals::default() }
}

#[test]
fn round_robin_cycles() {
    let e = engines(3);
    let s = scrape_with(vec![signals(0.0, 0.0); 3]);
    let mut p = RoundRobin::default();
    let picks: Vec<usize> = (0..4).map(|_| pick(&mut p, &request("x"), &e, &s, &[0; 3])).collect();
    assert_eq!(picks, [0, 1, 2, 0]);
}

#[test]
fn least_request_takes_the_less_loaded_of_two() {
    let e = engines(2);
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    let mut p = LeastRequest::new(1);
    for _ in 0..20 {
        assert_eq!(pick(&mut p, &request("x"), &e, &s, &[5, 1]), 1);
    }
}

#[test]
fn gie_default_filters_saturated_pods_then_weighs_queue_and_kv() {
    let e = engines(3);
    // Pod 0 is saturated (queue 6 > 5); pod 2 has the emptier cache at equal queue.
    let s = scrape_with(vec![signals(6.0, 0.1), signals(1.0, 0.7), signals(1.0, 0.2)]);
    let mut p = GieDefault::new(3, 1);
    assert_eq!(pick(&mut p, &request("x"), &e, &s, &[0; 3]), 2);
    // 2·queue + 2·kv: pod 1 (queue 0 → 1.0, kv 0.5 → 0.5) = 3.0 beats pod 2 (0, 0.9 → 1.8).
    let s = scrape_with(vec![signals(6.0, 0.1), signals(0.0, 0.5), signals(3.0, 0.1)]);
    assert_eq!(pick(&mut p, &request("y"), &e, &s, &[0; 3]), 1);
}

#[test]
fn gie_default_follows_its_own_past_choices_for_a_prefix() {
    let e = engines(2);
    let s = scrape_with(vec![signals(1.0, 0.3), signals(1.0, 0.3)]);
    let mut p = GieDefault::new(2, 7);
    let prompt = "a long shared system prompt ".repeat(20);
    let first = pick(&mut p, &request(&prompt), &e, &s, &[0; 2]);
    for _ in 0..5 {
        assert_eq!(pick(&mut p, &request(&prompt), &e, &s, &[0; 2]), first);
    }
}

#[test]
fn llmd_precise_uses_the_exact_cache() {
    let mut e = engines(2);
    let prompt = "cached prompt text ".repeat(30);
    let req = request(&prompt);
    // Run the prompt on pod 1 so its blocks are cached there.
    e[1].submit(SimRequest::from_text(1, 0.0, &req.prompt, 1, None, 16));
    let mut now = 0.0;
    while let Some(step) = e[1].step(now) {
        now += step.duration;
    }
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    assert_eq!(pick(&mut LlmdPrecise::new(1), &req, &e, &s, &[0; 2]), 1);
}

#[test]
fn sglang_goes_least_loaded_when_imbalanced() {
    let e = engines(2);
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    let mut p = SglangCacheAware::new(2);
    let prompt = "shared ".repeat(50);
    let first = pick(&mut p, &request(&prompt), &e, &s, &[0, 0]);
    assert_eq!(pick(&mut p, &request(&prompt), &e, &s, &[0, 0]), first, "match rate > 0.3 follows the tree");
    let mut loads = [0u32; 2];
    loads[first] = 100;
    loads[1 - first] = 10;
    assert_eq!(pick(&mut p, &request(&prompt), &e, &s, &loads), 1 - first, "100 − 10 > 64 and 100 > 1.5 × 10");
}

#[test]
fn sglang_takes_the_smallest_tree_without_a_match() {
    let e = engines(2);
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    let mut p = SglangCacheAware::new(2);
    let first = pick(&mut p, &request(&"one ".repeat(40)), &e, &s, &[0, 0]);
    assert_eq!(pick(&mut p, &request(&"two ".repeat(40)), &e, &s, &[0, 0]), 1 - first);
}

#[test]
fn dynamo_prefers_overlap_and_avoids_decode_load() {
    let mut e = engines(2);
    let prompt = "overlap me please ".repeat(40);
    let req = request(&prompt);
    e[0].submit(SimRequest::from_text(1, 0.0, &req.prompt, 1, None, 16));
    let mut now = 0.0;
    while let Some(step) = e[0].step(now) {
        now += step.duration;
    }
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    assert_eq!(pick(&mut DynamoKv::new(1), &req, &e, &s, &[0; 2]), 0, "overlap lowers pod 0's prefill cost");
    // Many decoding requests on pod 0 outweigh the overlap.
    for id in 10..40 {
        e[0].submit(SimRequest::from_text(id, now, "z".repeat(2000).as_bytes(), 500, None, 16));
    }
    for _ in 0..3 {
        if let Some(step) = e[0].step(now) {
            now += step.duration;
        }
    }
    assert_eq!(pick(&mut DynamoKv::new(1), &req, &e, &s, &[0; 2]), 1);
}

#[test]
fn the_oracle_picks_the_idle_pod() {
    let mut e = engines(2);
    for id in 0..20 {
        e[0].submit(SimRequest::from_text(id, 0.0, "q".repeat(4000).as_bytes(), 50, None, 16));
    }
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    assert_eq!(pick(&mut Oracle, &request("hello"), &e, &s, &[0; 2]), 1);
}
