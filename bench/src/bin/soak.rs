//! `soak`: the gateway, the agent and a simulated fleet under 70% of the fleet's
//! capacity for 30 minutes (by default), sampling memory and errors every 30 s. Fails if
//! any request failed or memory grew over 5% after warm-up.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use infergate_e2e::soak;

/// Hours of load, with nothing lost and nothing leaked.
#[derive(Parser)]
struct Args {
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
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let duration = Duration::from_secs_f64(args.minutes * 60.0);
    let report = runtime.block_on(soak::run(duration, Duration::from_secs_f64(args.sample_seconds)));
    let text = report.markdown();
    println!("{text}");
    if let Err(e) = std::fs::create_dir_all(&args.out).and_then(|()| std::fs::write(args.out.join("results.md"), &text))
    {
        eprintln!("error: cannot write {}: {e}", args.out.display());
    }
    let growths = [
        report.growth_after_warmup(|s| s.envoy_rss_mib),
        report.growth_after_warmup(|s| s.envoy_allocated_mib),
        report.growth_after_warmup(|s| s.vm_memory_mib),
        report.growth_after_warmup(|s| s.agent_rss_mib),
    ];
    if report.errors() > 0 || growths.iter().any(|g| *g >= 0.05) {
        eprintln!("soak failed: {} errors (first: {:?}), growth {growths:?}", report.errors(), report.first_errors);
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
