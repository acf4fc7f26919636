//! The tier-2 benchmark is deterministic, and its global router spends the latency
//! target on cost: cheaper than round robin across clusters on the same requests.

use infergate_bench::des;
use infergate_bench::global::{GlobalLayer, Layer, TwoRegions, summarize_run};

fn run(layer: Layer) -> infergate_bench::global::GlobalResult {
    let workload = TwoRegions { duration_s: 30.0, burst: (10.0, 20.0), ..TwoRegions::standard() };
    let (scenario, tags) = workload.scenario(3);
    let mut policy = GlobalLayer::new(layer, workload.pods_per_cluster, tags.clone(), 3);
    let (outcomes, _) = des::run_outcomes(&scenario, &mut policy);
    summarize_run(layer.name(), &scenario, &tags, &policy.clusters, &outcomes)
}

#[test]
fn the_same_seed_gives_the_same_result_and_the_global_router_is_cheaper_than_round_robin() {
    let ours = run(Layer::Infergate { latency_target_ms: 500 });
    let again = run(Layer::Infergate { latency_target_ms: 500 });
    assert_eq!(format!("{ours:?}"), format!("{again:?}"));
    let round_robin = run(Layer::RoundRobin);
    assert!(
        ours.cost_per_million_tokens < round_robin.cost_per_million_tokens,
        "ours {} vs round robin {}",
        ours.cost_per_million_tokens,
        round_robin.cost_per_million_tokens
    );
    assert!((round_robin.east_latency_served_west - 0.5).abs() < 0.05, "{round_robin:?}");
}
