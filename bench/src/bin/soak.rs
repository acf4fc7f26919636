//! `soak`: the gateway, the agent and a simulated fleet under 70% of the fleet's
//! capacity for 30 minutes (by default), sampling memory and errors every 30 s. Fails if
//! any request failed or memory grew over 5% after warm-up.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use infergate_bench::cli;
use infergate_harness::soak;

/// Hours of load, with nothing lost and nothing leaked.
#[derive(Parser)]
struct Args {
    /// Only check that Envoy, the filter and the agent are built, then exit.
    #[arg(long)]
    preflight: bool,
    /// Minutes of load.
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 30.0)]
    sample_seconds: f64,
    #[arg(long, default_value = "bench/results/soak")]
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
    let duration = Duration::from_secs_f64(args.minutes * 60.0);
    let report = runtime.block_on(soak::run(duration, Duration::from_secs_f64(args.sample_seconds)));
    let written = cli::report(&args.out, &report.markdown());
    let failures = report.failures();
    if !failures.is_empty() {
        eprintln!("soak failed: {}", failures.join("; "));
        return ExitCode::FAILURE;
    }
    written
}
