//! `peers`: BENCHMARKS.md's comparison with the peers' own routers. infergate in real
//! Envoy, the Shepherd Model Gateway (`smg`) and vLLM's router (`vllm-router`) as
//! installed from PyPI, and Envoy's `round_robin` and `least_request`, each in front of
//! fresh pods, on the same requests at the same times. Writes `results.json` (the
//! schema of `infergate_bench::peers::PeerResults`), `results.md` and a TTFT p90 chart
//! to `--out`, the JSON again after every run so that a stopped run keeps what it made,
//! and each run's requests (`trace-<workload>-<load>-<gateway>.jsonl`: when each was
//! sent, the pod that answered, its TTFT).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use infergate_bench::engine_runs::{self, PodKvEvents, Pods};
use infergate_bench::inference_perf::{self, SharedPrefix};
use infergate_bench::peers::{GATEWAYS, Gateway, PeerResults, PeerRun, report};
use infergate_bench::provenance::Provenance;
use infergate_bench::workloads::{LoadStep, Scaling, Scenario, TraceReplay, Workload, scaled};
use infergate_bench::{cli, e2e, suite};
use infergate_harness::peer_router::{SMG_VERSION, VLLM_ROUTER_VERSION, peers_venv};

/// Runs infergate beside the peers' own routers, end to end.
#[derive(Parser)]
struct Args {
    /// Only these gateways (comma-separated), in the report's order.
    #[arg(long, value_delimiter = ',', default_values_t = GATEWAYS.map(String::from))]
    gateways: Vec<String>,
    /// Only these workloads (comma-separated): bursty-chat, shared-prefix,
    /// trace-replay, agentic.
    #[arg(long, value_delimiter = ',', default_values_t = PART_2_WORKLOADS.map(String::from))]
    workloads: Vec<String>,
    /// The recorded agent sessions `agentic` replays (the format of
    /// ../shared/traces/agentic); `AGENTIC=DIR make bench-peers` sets it.
    #[arg(long, value_name = "DIR", default_value = suite::DEFAULT_AGENTIC)]
    agentic: PathBuf,
    /// Sessions at once of `agentic`, each a run of its own.
    #[arg(long, value_delimiter = ',', default_values_t = [16.0, 32.0])]
    agentic_sessions: Vec<f64>,
    /// Seconds `agentic` sends calls for (sessions start within the first 120).
    #[arg(long, default_value_t = 300.0)]
    agentic_duration: f64,
    /// The Mooncake trace `trace-replay` replays (its first minute at 2×).
    #[arg(long, default_value = suite::DEFAULT_TRACE)]
    trace: PathBuf,
    /// The pods run this many times slower than the engine model, arrivals alike.
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Seed of every workload's requests.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Which parts (comma-separated): 2 on model-sim pods, 3 on real vLLM pods.
    #[arg(long, value_delimiter = ',', default_values_t = [2, 3])]
    parts: Vec<u8>,
    /// Part 3: inference-perf `shared_prefix` requests per second, for this many
    /// seconds, on this many vLLM pods (BENCHMARKS.md part 3's shape).
    #[arg(long, default_value_t = 2.0)]
    vllm_rate: f64,
    #[arg(long, default_value_t = 300)]
    vllm_duration: u32,
    #[arg(long, default_value_t = 3)]
    vllm_pods: usize,
    /// Part 3 also replays the agentic sessions on the vLLM pods, this many at once for
    /// `--vllm-agentic-duration` seconds, every prompt cut to its first
    /// 1/`--vllm-agentic-divisor` (0 sessions: no replay).
    #[arg(long, default_value_t = 16.0)]
    vllm_agentic_sessions: f64,
    #[arg(long, default_value_t = 300.0)]
    vllm_agentic_duration: f64,
    #[arg(long, default_value_t = 100)]
    vllm_agentic_divisor: usize,
    #[arg(long, default_value = "bench/results/peers")]
    out: PathBuf,
    /// Only write results.md and the chart again from `--out`'s results.json.
    #[arg(long)]
    report_only: bool,
}

/// Part 3's workload: BENCHMARKS.md part 3's inference-perf `shared_prefix` (15 groups
/// of 16 prompts, 1,000-token system prompts, 64-token questions, 32 output tokens).
fn part_3_workload(args: &Args) -> SharedPrefix {
    SharedPrefix {
        groups: 15,
        prompts_per_group: 16,
        system_prompt_tokens: 1000,
        question_tokens: 64,
        output_tokens: 32,
        rate: args.vllm_rate,
        duration_s: args.vllm_duration,
        seed: args.seed,
    }
}

const PART_2_WORKLOADS: [&str; 4] = ["bursty-chat", "shared-prefix", "trace-replay", "agentic"];

/// Part 2's workloads: part 2's request sets, and the agentic sessions at each load.
fn part_2_workloads(args: &Args) -> Result<Vec<Box<dyn Workload>>, String> {
    let mut workloads: Vec<Box<dyn Workload>> = Vec::new();
    let wanted = |name: &str| args.workloads.iter().any(|w| w == name);
    let trace = if wanted(TraceReplay::NAME) {
        let trace = TraceReplay::load(&args.trace, vec![suite::E2E_TRACE_SPEED], Some(suite::E2E_TRACE_WINDOW_S))
            .map_err(|e| format!("trace-replay: {e}"))?;
        Some(trace)
    } else {
        None
    };
    for (workload, _) in suite::e2e_workloads(trace) {
        if wanted(workload.name()) {
            workloads.push(workload);
        }
    }
    if wanted("agentic") {
        let agentic = suite::agentic(
            suite::SuiteKind::Quick,
            &args.agentic,
            Some(args.agentic_sessions.clone()),
            Some(args.agentic_duration),
        )
        .map_err(|e| format!("agentic: {e}"))?;
        workloads.push(Box::new(agentic));
    }
    Ok(workloads)
}

/// Part 3's agentic replay: the sessions at `--vllm-agentic-sessions`, scaled for
/// SmolLM2 on the vLLM pods.
fn vllm_agentic(args: &Args) -> Result<Scenario, String> {
    let sessions = args.vllm_agentic_sessions;
    let agentic =
        suite::agentic(suite::SuiteKind::Quick, &args.agentic, Some(vec![sessions]), Some(args.vllm_agentic_duration))
            .map_err(|e| format!("agentic: {e}"))?;
    let scenario = agentic.scenario(LoadStep { qps: sessions }, suite::e2e_request_set_seed("agentic", args.seed, 0));
    let scaling = Scaling { divisor: args.vllm_agentic_divisor, max_output_tokens: 32, pods: args.vllm_pods };
    Ok(scaled(&scenario, scaling, engine_runs::MODEL, engine_runs::SMOLLM2_CPU))
}

fn check(args: &Args) -> Result<(), String> {
    if let Some(unknown) = args.gateways.iter().find(|g| Gateway::named(g).is_none()) {
        return Err(format!("--gateways: unknown gateway `{unknown}`; choose from {}", GATEWAYS.join(", ")));
    }
    if let Some(unknown) = args.workloads.iter().find(|w| !PART_2_WORKLOADS.contains(&w.as_str())) {
        return Err(format!("--workloads: unknown workload `{unknown}`; choose from {}", PART_2_WORKLOADS.join(", ")));
    }
    if args.time_scale.is_nan() || args.time_scale <= 0.0 {
        return Err("--time-scale must be above 0".into());
    }
    if let Some(part) = args.parts.iter().find(|p| !matches!(p, 2 | 3)) {
        return Err(format!("--parts: no part {part}; part 2 runs model-sim pods, part 3 real vLLM pods"));
    }
    peers_venv()?;
    if args.parts.contains(&3) {
        infergate_harness::engines::vllm_installed()?;
        inference_perf::installed()?;
    }
    Ok(())
}

/// One gateway on one scenario; `Err` when a peer's router does not come up.
async fn run_one(
    args: &Args,
    gateway: &Gateway,
    scenario: &Arc<Scenario>,
    logs: &Path,
) -> Result<e2e::Measured, String> {
    match gateway {
        Gateway::Envoy(policy) => Ok(e2e::run(Arc::clone(scenario), *policy, args.time_scale, 1).await),
        Gateway::Peer(kind) => e2e::run_peer(Arc::clone(scenario), *kind, args.time_scale, logs).await,
    }
}

/// A line above the progress bar, or on stderr where no bar is drawn (not a terminal).
fn say(bar: &ProgressBar, line: String) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}

/// One run done: its line, its requests' trace when it has one, and results.json again.
fn record(
    bar: &ProgressBar,
    results: &mut PeerResults,
    out: &Path,
    label: &str,
    run: PeerRun,
    trace: Option<(&Path, &[e2e::TraceLine])>,
) -> Result<(), String> {
    if let Some((path, lines)) = trace {
        let lines: Vec<String> = lines.iter().filter_map(|l| serde_json::to_string(l).ok()).collect();
        std::fs::write(path, lines.join("\n") + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    say(
        bar,
        format!(
            "{label}: TTFT p90 {:.0} ms, mean {:.0} ms, {} of {} failed, engines' hit rate {:.1}%",
            run.ttft_ms.p90,
            run.ttft_ms.mean,
            run.failed,
            run.requests,
            run.prefix_hit_rate * 100.0
        ),
    );
    results.add(run);
    write_results(out, results)
}

fn write_results(out: &Path, results: &PeerResults) -> Result<(), String> {
    let json = serde_json::to_string_pretty(results).map_err(|e| e.to_string())?;
    let path = out.join("results.json");
    std::fs::write(&path, json + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(message) = check(&args).or_else(|e| if args.report_only { Ok(()) } else { Err(e) }) {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    if let Err(code) = cli::preflight(false) {
        return code;
    }
    let workloads = match if args.parts.contains(&2) { part_2_workloads(&args) } else { Ok(Vec::new()) } {
        Ok(workloads) => workloads,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(args.out.join("logs")) {
        eprintln!("error: cannot create {}: {e}", args.out.display());
        return ExitCode::FAILURE;
    }
    let runtime = match cli::runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let earlier = std::fs::read_to_string(args.out.join("results.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<PeerResults>(&text).ok());
    if args.report_only {
        return match earlier {
            Some(results) => write_report(&args.out, &results),
            None => {
                eprintln!("error: --report-only: no readable {}", args.out.join("results.json").display());
                ExitCode::from(2)
            }
        };
    }
    let peers = vec![format!("smg {SMG_VERSION}"), format!("vllm-router {VLLM_ROUTER_VERSION}")];
    let mut results = PeerResults::carrying(Provenance::here(), peers, earlier);
    let gateways: Vec<(&'static str, Gateway)> = GATEWAYS
        .into_iter()
        .filter(|g| args.gateways.iter().any(|wanted| wanted == g))
        .filter_map(|g| Gateway::named(g).map(|gateway| (g, gateway)))
        .collect();
    let part_3_runs = if args.parts.contains(&3) { 1 + usize::from(args.vllm_agentic_sessions > 0.0) } else { 0 };
    let steps: usize = workloads.iter().map(|w| w.steps().len()).sum::<usize>() + part_3_runs;
    let bar = ProgressBar::new((steps * gateways.len()) as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} runs {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    for workload in &workloads {
        for step in workload.steps() {
            let scenario =
                Arc::new(workload.scenario(step, suite::e2e_request_set_seed(workload.name(), args.seed, 0)));
            for (name, gateway) in &gateways {
                bar.set_message(format!("{} at {}: {name}", workload.name(), step.qps));
                let label = format!("{} at {}: {name}", workload.name(), step.qps);
                match runtime.block_on(run_one(&args, gateway, &scenario, &args.out.join("logs"))) {
                    Ok(measured) => {
                        let run = PeerRun::of(2, workload.name(), step.qps, name, scenario.pods, &measured.result);
                        let trace = args.out.join(format!("trace-{}-{}-{name}.jsonl", workload.name(), step.qps));
                        let traced = Some((trace.as_path(), measured.trace.as_slice()));
                        if let Err(message) = record(&bar, &mut results, &args.out, &label, run, traced) {
                            eprintln!("error: {message}");
                            return ExitCode::FAILURE;
                        }
                    }
                    Err(message) => say(&bar, format!("{label} failed: {message}")),
                }
                bar.inc(1);
            }
        }
    }
    if args.parts.contains(&3) {
        let workload = part_3_workload(&args);
        for (name, gateway) in &gateways {
            bar.set_message(format!("real vLLM, shared_prefix at {} req/s: {name}", workload.rate));
            let out = args.out.join("vllm").join(name);
            // Every gateway's pods publish KV events, though only kv_aware reads them.
            let run = runtime.block_on(engine_runs::run_through(
                Pods::Vllm,
                args.vllm_pods,
                name,
                gateway,
                PodKvEvents::Published,
                &workload,
                &out,
            ));
            let label = format!("real vLLM, shared_prefix: {name}");
            match run {
                Ok(run) => {
                    let run = PeerRun::of_engines(&run, "shared_prefix", workload.rate, args.vllm_pods);
                    if let Err(message) = record(&bar, &mut results, &args.out, &label, run, None) {
                        eprintln!("error: {message}");
                        return ExitCode::FAILURE;
                    }
                }
                Err(message) => say(&bar, format!("{label} failed: {message}")),
            }
            bar.inc(1);
        }
        if args.vllm_agentic_sessions > 0.0 {
            let scenario = match vllm_agentic(&args) {
                Ok(scenario) => Arc::new(scenario),
                Err(message) => {
                    eprintln!("error: {message}");
                    return ExitCode::from(2);
                }
            };
            let sessions = args.vllm_agentic_sessions;
            for (name, gateway) in &gateways {
                bar.set_message(format!("real vLLM, agentic at {sessions} sessions: {name}"));
                let out = args.out.join("vllm-agentic").join(name);
                let label = format!("real vLLM, agentic: {name}");
                match runtime.block_on(engine_runs::run_scenario_through(
                    args.vllm_pods,
                    name,
                    gateway,
                    &scenario,
                    &out,
                )) {
                    Ok(measured) => {
                        let run = PeerRun::of(3, "agentic", sessions, name, args.vllm_pods, &measured.result);
                        let trace = out.join("trace.jsonl");
                        if let Err(message) =
                            record(&bar, &mut results, &args.out, &label, run, Some((&trace, &measured.trace)))
                        {
                            eprintln!("error: {message}");
                            return ExitCode::FAILURE;
                        }
                    }
                    Err(message) => say(&bar, format!("{label} failed: {message}")),
                }
                bar.inc(1);
            }
        }
    }
    bar.finish_with_message("done");
    write_report(&args.out, &results)
}

/// `results.md` and the chart, from `results`.
fn write_report(out: &Path, results: &PeerResults) -> ExitCode {
    if let Err(message) = report::chart(out, results) {
        eprintln!("error: the chart: {message}");
        return ExitCode::FAILURE;
    }
    cli::report(out, &report::markdown(results))
}
