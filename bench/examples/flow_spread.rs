//! Whether the gateway queue changes part 2's tail: the same scaled workload as
//! `des_spread`, generated from several seeds, routed in virtual time by infergate
//! without and with its gateway queue (every request standard, one tenant).
//!
//! `cargo run --release -p infergate-bench --example flow_spread -- [WORKLOAD] [SETS]`
//! (defaults: bursty-chat, 12). Set 0 is the one part 2 runs with seed 42.

use infergate_bench::{fleet, flow, suite};

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "bursty-chat".into());
    let sets: u64 = args.next().map_or(Ok(12), |s| s.parse()).map_err(|e| format!("SETS: {e}"))?;
    let (workload, _) = suite::e2e_workloads(None)
        .into_iter()
        .find(|(w, _)| w.name() == name)
        .ok_or_else(|| format!("no part-2 workload named {name}"))?;
    let step = workload.steps()[0];
    const GATES: [&str; 2] = ["no_queue", "infergate"];
    println!("{name}: TTFT p90 / p99 (longest held) in simulated ms per request set (set 0 is part 2's)\n");
    println!("| request set | {} |", GATES.join(" | "));
    println!("|---|{}", "---:|".repeat(GATES.len()));
    for set in 0..sets {
        let seed = suite::e2e_request_set_seed(&name, 42, set);
        let scenario = workload.scenario(step, seed);
        let tags = flow::Tag::untagged(&scenario);
        let fleet = fleet::FleetConfig::new(scenario.pods, &scenario.adapters);
        let mut cells = Vec::new();
        for gate_name in GATES {
            let mut gate = flow::build(gate_name, &fleet, 42, &flow::infergate_settings()).ok_or("unknown gate")?;
            let outcomes = flow::run(&scenario, &tags, &fleet, gate.as_mut());
            let result = flow::summarize(gate_name, &outcomes, &tags, scenario.duration_s);
            let g = result.classes.get("standard").cloned().unwrap_or_default();
            cells.push(format!("{:.0} / {:.0} ({:.0})", g.ttft_p90_ms, g.ttft_p99_ms, g.max_queued_ms));
        }
        println!("| {set} | {} |", cells.join(" | "));
    }
    Ok(())
}
