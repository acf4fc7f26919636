//! `agent-scale`: the metrics agent scraping N simulated pods at 100 ms through real
//! Envoy; prints a Markdown table and writes it to bench/results/.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use infergate_bench::agent_scale;
use infergate_bench::cli;

/// Measures the agent's CPU per pod, its memory, the snapshot size, and the time from a
/// pod's metric change to routing in Envoy following it, for each fleet size.
#[derive(Parser)]
struct Args {
    /// Only check that Envoy, the filter and the agent are built, then exit.
    #[arg(long)]
    preflight: bool,
    /// Fleet sizes to measure (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [100, 250, 500, 1000])]
    pods: Vec<usize>,
    /// Seconds of steady scraping over which CPU is measured.
    #[arg(long, default_value_t = 20)]
    window_s: u64,
    /// Metric changes timed per fleet size.
    #[arg(long, default_value_t = 100)]
    trials: u64,
    /// Where to write results.md.
    #[arg(long, default_value = "bench/results/agent-scale")]
    out: std::path::PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(code) = cli::preflight(args.preflight) {
        return code;
    }
    let runtime = match cli::runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let mut results = Vec::new();
    for &pods in &args.pods {
        eprintln!("agent-scale: {pods} pods…");
        match runtime.block_on(agent_scale::run(pods, Duration::from_secs(args.window_s), args.trials)) {
            Ok(result) => {
                eprintln!("{result:?}");
                results.push(result);
            }
            Err(e) => {
                eprintln!("error: {pods} pods: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let table = agent_scale::markdown(&results);
    cli::report(&args.out, &table)
}
