//! How much part 2's discrete-event prediction depends on the one request set it is
//! made for: the same scaled workload, generated from several seeds, each routed by
//! each policy in virtual time. Part 2 compares the measured tail with the prediction
//! for its own request set; this shows whether that prediction is typical.
//!
//! `cargo run --release -p infergate-bench --example des_spread -- [WORKLOAD] [SETS]`
//! (defaults: bursty-chat, 12). Set 0 is the one part 2 runs with seed 42.

use infergate_bench::{des, e2e, fleet, policies, suite};

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "bursty-chat".into());
    let sets: u64 = args.next().map_or(Ok(12), |s| s.parse()).map_err(|e| format!("SETS: {e}"))?;
    let (workload, _) = suite::e2e_workloads(None)
        .into_iter()
        .find(|(w, _)| w.name() == name)
        .ok_or_else(|| format!("no part-2 workload named {name}"))?;
    let step = workload.steps()[0];
    const POLICIES: [&str; 3] = ["infergate", "round_robin", "least_request"];
    println!("{name}: TTFT p90 / p99 in simulated ms per request set (set 0 is part 2's)\n");
    println!("| request set | {} |", POLICIES.join(" | "));
    println!("|---|{}", "---:|".repeat(POLICIES.len()));
    let mut p99s = vec![Vec::new(); POLICIES.len()];
    for set in 0..sets {
        let seed = suite::e2e_request_set_seed(&name, 42, set);
        let scenario = workload.scenario(step, seed);
        let fleet = fleet::FleetConfig::new(scenario.pods, &scenario.adapters);
        let mut cells = Vec::new();
        for (policy, p99) in POLICIES.iter().zip(p99s.iter_mut()) {
            let workers = e2e::ENVOY_WORKERS as usize;
            let mut routed =
                policies::build_behind_envoy(policy, scenario.pods, 42, &fleet, workers).ok_or("unknown policy")?;
            let scrape_interval_s = e2e::SCRAPE_INTERVAL_MS as f64 / 1000.0;
            let result = des::run_scraped_every(&scenario, routed.as_mut(), scrape_interval_s);
            cells.push(format!("{:.0} / {:.0}", result.ttft_ms.p90, result.ttft_ms.p99));
            p99.push(result.ttft_ms.p99);
        }
        println!("| {set} | {} |", cells.join(" | "));
    }
    let medians: Vec<String> = p99s
        .iter_mut()
        .map(|p99| {
            p99.sort_by(f64::total_cmp);
            format!("{:.0}", p99.get(p99.len() / 2).copied().unwrap_or(f64::NAN))
        })
        .collect();
    println!("| median p99 | {} |", medians.join(" | "));
    Ok(())
}
