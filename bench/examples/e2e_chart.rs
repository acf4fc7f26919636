//! Redraws part 2's TTFT p99 chart from a saved run's `e2e-<workload>.json`, without
//! running anything again: after a change to how the chart is drawn.
//!
//! `cargo run --release -p infergate-bench --example e2e_chart -- DIR [WORKLOAD]`
//! (default workload: bursty-chat). Writes `e2e-ttft-p99-<workload>.{svg,png}` to DIR.

use std::path::PathBuf;

use infergate_bench::report::e2e::{run_label, write_e2e_tail_chart};
use infergate_bench::suite;
use serde_json::Value;

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("give the run's directory, e.g. bench/results/e2e")?);
    let name = args.next().unwrap_or_else(|| "bursty-chat".into());
    let path = dir.join(format!("e2e-{name}.json"));
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let rows: Vec<Value> = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let (workload, _) = suite::e2e_workloads(None)
        .into_iter()
        .find(|(w, _)| w.name() == name)
        .ok_or_else(|| format!("no part-2 workload named {name}"))?;
    let load = workload.steps()[0].qps;
    let mut runs = Vec::new();
    let mut sets = 0;
    for row in &rows {
        let policy = row["policy"].as_str().ok_or("a row without its policy")?;
        let replicas = row["replicas"].as_u64().map_or(1, |n| n as usize);
        let label = run_label(policy, replicas);
        let p99 = row["measured"]["ttft_ms"]["p99"].as_f64().ok_or("a row without its measured p99")?;
        sets = sets.max(row["request_set"].as_u64().unwrap_or(0) + 1);
        runs.push((label, p99));
    }
    write_e2e_tail_chart(&dir, &name, load, sets, &runs)?;
    println!("wrote {}/e2e-ttft-p99-{name}.{{svg,png}} from {} runs", dir.display(), runs.len());
    Ok(())
}
