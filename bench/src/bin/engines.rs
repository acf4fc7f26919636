//! `engines`: BENCHMARKS.md part 3. inference-perf's `shared_prefix` workload through
//! real Envoy to real vLLM pods (CPU) and to model-sim pods shaped like them, with
//! infergate, `round_robin` and `least_request`; fresh pods for every policy. Writes
//! `results.md`, `results.json` and a TTFT p90 chart to `--out`.

use std::process::ExitCode;

use clap::Parser;
use infergate_bench::engine_runs::{self, POLICIES, Pods};
use infergate_bench::inference_perf::{self, SharedPrefix};
use infergate_bench::{cli, report};

/// Measures routing in front of real engines with the field's own load generator.
#[derive(Parser)]
struct Args {
    /// Only check that Envoy, the filter, the agent, vLLM and inference-perf are in
    /// place, then exit.
    #[arg(long)]
    preflight: bool,
    /// Which pods, in this order (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Pods::Vllm, Pods::ModelSim])]
    pods: Vec<Pods>,
    /// Policies, in this order (comma-separated): infergate, round_robin, least_request.
    #[arg(long, value_delimiter = ',', default_values_t = POLICIES.map(|(name, _)| name.to_string()))]
    policies: Vec<String>,
    /// Pods per run. Three pods, 15 groups: no pod can cache every group, the three
    /// together can (BENCHMARKS.md part 3).
    #[arg(long, default_value_t = 3)]
    count: usize,
    /// Requests per second, constant for `--duration` seconds.
    #[arg(long, default_value_t = 0.8)]
    rate: f64,
    #[arg(long, default_value_t = 300)]
    duration: u32,
    /// Distinct shared system prompts.
    #[arg(long, default_value_t = 15)]
    groups: u32,
    #[arg(long, default_value_t = 16)]
    prompts_per_group: u32,
    /// Tokens of each shared system prompt.
    #[arg(long, default_value_t = 1000)]
    system_prompt_tokens: u32,
    #[arg(long, default_value_t = 64)]
    question_tokens: u32,
    #[arg(long, default_value_t = 32)]
    output_tokens: u32,
    /// Seed of the prompts (inference-perf draws its arrival gaps unseeded).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[arg(long, default_value = "bench/results/engines")]
    out: std::path::PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(unknown) = args.policies.iter().find(|p| !POLICIES.iter().any(|(name, _)| name == p)) {
        eprintln!("error: unknown policy {unknown:?}; the policies are infergate, round_robin and least_request");
        return ExitCode::from(2);
    }
    if let Err(code) = preflight(&args) {
        return code;
    }
    let workload = SharedPrefix {
        groups: args.groups,
        prompts_per_group: args.prompts_per_group,
        system_prompt_tokens: args.system_prompt_tokens,
        question_tokens: args.question_tokens,
        output_tokens: args.output_tokens,
        rate: args.rate,
        duration_s: args.duration,
        seed: args.seed,
    };
    let runtime = match cli::runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let result = runtime.block_on(async {
        let mut runs = Vec::new();
        for &pods in &args.pods {
            for policy in POLICIES.into_iter().filter(|(name, _)| args.policies.iter().any(|p| p == name)) {
                let dir = args.out.join(format!("{}-{}", pods.name(), policy.0));
                let run = engine_runs::run(pods, args.count, policy, &workload, &dir).await?;
                eprintln!(
                    "{}/{}: {} of {} ok, TTFT p90 {:.0} ms, prefix hit rate {}",
                    run.pods,
                    run.policy,
                    run.summary.succeeded,
                    run.summary.sent,
                    run.summary.ttft_ms.p90,
                    run.counters.hit_rate().map_or_else(|| "–".into(), |r| format!("{:.1}%", r * 100.0))
                );
                runs.push(run);
            }
        }
        Ok::<_, String>(runs)
    });
    let runs = match result {
        Ok(runs) => runs,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::FAILURE;
        }
    };
    let json = serde_json::json!({"workload": workload, "pods_per_run": args.count, "runs": runs});
    let bars: Vec<(String, f64)> =
        runs.iter().map(|r| (format!("{}/{}", r.pods, r.policy), r.summary.ttft_ms.p90)).collect();
    let title = format!(
        "inference-perf shared_prefix at {} req/s, {} s, {} pods: TTFT p90 per run",
        args.rate, args.duration, args.count
    );
    let chart =
        report::bars::Bars { title: &title, metric: "TTFT p90", unit: report::style::Unit::Millis, bars: &bars };
    let written = std::fs::create_dir_all(&args.out)
        .map_err(|e| e.to_string())
        .and_then(|()| std::fs::write(args.out.join("results.json"), json.to_string()).map_err(|e| e.to_string()))
        .and_then(|()| report::bars::write_bars(&args.out, "ttft-p90", &chart));
    if let Err(e) = written {
        eprintln!("error: cannot write the results to {}: {e}", args.out.display());
        return ExitCode::FAILURE;
    }
    cli::report(&args.out, &engine_runs::markdown(&runs, &workload, args.count))
}

/// Envoy, the filter and the agent, plus what the chosen pods and the client need.
fn preflight(args: &Args) -> Result<(), ExitCode> {
    cli::preflight(false)?;
    let mut missing: Vec<String> = inference_perf::installed().err().into_iter().collect();
    if args.pods.contains(&Pods::Vllm) {
        missing.extend(infergate_harness::engines::vllm_installed().err());
    }
    for what in &missing {
        eprintln!("error: {what}");
    }
    if !missing.is_empty() {
        return Err(ExitCode::from(2));
    }
    if args.preflight {
        eprintln!("preflight: Envoy, the filter, the agent, inference-perf and the chosen pods are in place");
        return Err(ExitCode::SUCCESS);
    }
    Ok(())
}
