//! The same seed gives byte-identical results, for every policy.

use infergate_bench::des;
use infergate_bench::fleet::FleetConfig;
use infergate_bench::policies::{self, POLICIES};
use infergate_bench::workloads::{BurstyChat, LoadStep, MultiRoundChat, Workload};

fn results_json(workload: &dyn Workload, step: LoadStep, seed: u64) -> String {
    let scenario = workload.scenario(step, seed);
    let fleet = FleetConfig::new(scenario.pods, &scenario.adapters);
    let mut all = Vec::new();
    for name in POLICIES {
        let mut policy = policies::build(name, scenario.pods, seed, &fleet).unwrap();
        all.push((name, des::run(&scenario, policy.as_mut())));
    }
    serde_json::to_string(&all).unwrap()
}

#[test]
fn a_seed_gives_byte_identical_results() {
    let chat = MultiRoundChat { users: 8, rounds: 3, qps_steps: vec![8.0] };
    let first = results_json(&chat, LoadStep { qps: 8.0 }, 7);
    assert_eq!(first, results_json(&chat, LoadStep { qps: 8.0 }, 7));
    assert_ne!(first, results_json(&chat, LoadStep { qps: 8.0 }, 8), "another seed, another run");

    let bursty = BurstyChat::published(2.0, 4.0, vec![0.6]);
    let step = bursty.steps()[0];
    assert_eq!(results_json(&bursty, step, 3), results_json(&bursty, step, 3));
}

#[test]
fn every_request_is_served_at_light_load() {
    let chat = MultiRoundChat { users: 8, rounds: 3, qps_steps: vec![4.0] };
    let scenario = chat.scenario(LoadStep { qps: 4.0 }, 1);
    let fleet = FleetConfig::new(scenario.pods, &scenario.adapters);
    for name in POLICIES {
        let mut policy = policies::build(name, scenario.pods, 1, &fleet).unwrap();
        let result = des::run(&scenario, policy.as_mut());
        assert_eq!((result.requests, result.failed), (24, 0), "{name}");
    }
}
