//! `global`: tier 2 in the discrete-event simulator. Two regions' clusters of 4
//! simulated pods; east's clients burst past their cluster's capacity. infergate's
//! global router against round robin across clusters and against no tier 2, on the
//! same requests with the same seed: TTFT p90 per class, shed rate, cost per 1M tokens.

use std::path::PathBuf;

use clap::Parser;
use infergate_bench::des;
use infergate_bench::global::{GlobalLayer, GlobalResult, Layer, TwoRegions, markdown, summarize_run};

/// Run the tier-2 scenario under each global layer and print the table.
#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Override the rates: EAST,EAST_BURST,WEST requests per second.
    #[arg(long)]
    rates: Option<String>,
    /// Where to write results.json and the chart.
    #[arg(long, default_value = "bench/results/global")]
    out: PathBuf,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let mut workload = TwoRegions::standard();
    if let Some(rates) = &args.rates {
        let parsed: Vec<f64> = rates.split(',').filter_map(|r| r.parse().ok()).collect();
        if let [east, burst, west] = parsed[..] {
            (workload.east_qps, workload.east_burst_qps, workload.west_qps) = (east, burst, west);
        }
    }
    let (scenario, tags) = workload.scenario(args.seed);
    let mut results: Vec<GlobalResult> = Vec::new();
    for layer in Layer::ALL {
        let mut policy = GlobalLayer::new(layer, workload.pods_per_cluster, tags.clone(), args.seed);
        let (outcomes, _engines) = des::run_outcomes(&scenario, &mut policy);
        results.push(summarize_run(layer.name(), &scenario, &tags, &policy.clusters, &outcomes));
    }
    let table = markdown(&results);
    println!(
        "tier 2: 2 clusters x {} pods (east 0.60, west 0.40 per 1M tokens); east {}/s with a burst to {}/s over {:?} s, west {}/s; {:.0}% batch; seed {}\n",
        workload.pods_per_cluster,
        workload.east_qps,
        workload.east_burst_qps,
        workload.burst,
        workload.west_qps,
        workload.batch_share * 100.0,
        args.seed
    );
    print!("{table}");
    if let Err(err) = write(&args.out, &workload, &results, &table) {
        eprintln!("error: {err}");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}

fn write(dir: &std::path::Path, workload: &TwoRegions, results: &[GlobalResult], table: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let json = serde_json::to_string_pretty(results).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("results.json"), json).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("table.md"), table).map_err(|e| e.to_string())?;
    infergate_bench::global::chart(&dir.join("global.svg"), workload, results)
}
