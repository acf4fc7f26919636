//! infergate behind 1, 2, … gateway replicas in virtual time, over several request
//! sets of a part-2 workload: what part 2's replica runs predict, without the noise of
//! runs through Envoy. Each replica is its own router; they exchange prefix claims and
//! loads at each scrape, as the agent's pushes do (`policies::InfergateReplicas`).
//! A shorter scrape interval shortens the exchange's lag with it.
//!
//! `cargo run --release -p infergate-bench --example des_replicas -- [WORKLOAD] [SETS]
//! [REPLICAS] [SCRAPE_MS]` (defaults: shared-prefix, 12, 3, part 2's 50 ms). Set 0 is
//! the one part 2 runs with seed 42.

use infergate_bench::results::{RequestOutcome, RunResult};
use infergate_bench::{des, e2e, fleet, policies, suite};

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "shared-prefix".into());
    let sets: u64 = args.next().map_or(Ok(12), |s| s.parse()).map_err(|e| format!("SETS: {e}"))?;
    let most: usize = args.next().map_or(Ok(3), |s| s.parse()).map_err(|e| format!("REPLICAS: {e}"))?;
    let scrape_ms: u64 =
        args.next().map_or(Ok(e2e::SCRAPE_INTERVAL_MS), |s| s.parse()).map_err(|e| format!("SCRAPE_MS: {e}"))?;
    let (workload, _) = suite::e2e_workloads(None)
        .into_iter()
        .find(|(w, _)| w.name() == name)
        .ok_or_else(|| format!("no part-2 workload named {name}"))?;
    let step = workload.steps()[0];
    println!("{name}, scraped every {scrape_ms} ms: infergate's TTFT p90 / p99 in simulated ms, by replicas\n");
    println!("| request set | {} |", (1..=most).map(|n| n.to_string()).collect::<Vec<_>>().join(" | "));
    println!("|---|{}", "---:|".repeat(most));
    let mut pooled: Vec<Vec<RequestOutcome>> = vec![Vec::new(); most];
    for set in 0..sets {
        let seed = suite::e2e_request_set_seed(&name, 42, set);
        let scenario = workload.scenario(step, seed);
        let fleet = fleet::FleetConfig::new(scenario.pods, &scenario.adapters);
        let mut cells = Vec::new();
        for (replicas, all) in (1..=most).zip(pooled.iter_mut()) {
            let mut policy = policies::InfergateReplicas::new(&fleet, 42, replicas);
            let (outcomes, _) = des::run_outcomes_scraped_every(&scenario, &mut policy, scrape_ms as f64 / 1000.0);
            cells.push(p90_p99(&outcomes));
            all.extend(outcomes);
        }
        println!("| {set} | {} |", cells.join(" | "));
    }
    let pooled: Vec<String> = pooled.iter().map(|all| p90_p99(all)).collect();
    println!("| pooled | {} |", pooled.join(" | "));
    Ok(())
}

fn p90_p99(outcomes: &[RequestOutcome]) -> String {
    let ttft = RunResult::from_outcomes(outcomes).ttft_ms;
    format!("{:.0} / {:.0}", ttft.p90, ttft.p99)
}
