//! `disagg_e2e`: the end-to-end check of prefill/decode disaggregation. One
//! request set per workload, fixed seed, through real Envoy with the filter in
//! `mode: gateway`, `split: predicted`, the release agent and model-sim pods with
//! roles (3 prefill + 5 decode by default), streamed; beside it the discrete-event
//! prediction of `pd/infergate` for the very same requests, fleet and link. Writes
//! results.json, results.md and one trace per workload (a line per request).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use infergate_bench::disagg::{
    self, Comparison, GuideShape, Layout, Link, MixedChat, PolicyKind, Slo, comparison_markdown, e2e,
};
use infergate_bench::workloads::{LoadStep, Scenario, Workload};
use infergate_core::config::SplitPolicy;

/// Check the P/D discrete-event prediction against real Envoy.
#[derive(Parser)]
struct Args {
    /// Where to write results.json, results.md and the traces.
    #[arg(long, default_value = "bench/results/disagg-e2e")]
    out: PathBuf,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// The pods run this many times slower than the engine model, and arrivals are
    /// stretched alike, so that the two cores keep up.
    #[arg(long, default_value_t = 5.0)]
    time_scale: f64,
    /// Prefill pods of the 8 (the rest decode).
    #[arg(long, default_value_t = 3)]
    prefill_pods: usize,
    /// Only these workloads: llm-d-guide, mixed-chat.
    #[arg(long, value_delimiter = ',', default_value = "llm-d-guide,mixed-chat")]
    workloads: Vec<String>,
    /// llm-d-guide's Poisson rates, requests per simulated second: a run each.
    #[arg(long, value_delimiter = ',', default_value = "8,16")]
    guide_rates: Vec<f64>,
    /// mixed-chat's rates of chat and document starts per simulated second.
    #[arg(long, value_delimiter = ',', default_value = "15")]
    mixed_rates: Vec<f64>,
    /// Simulated seconds of arrivals per workload.
    #[arg(long, default_value_t = 30.0)]
    duration_s: f64,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A workload, its load, and how that load reads.
type Planned = (Box<dyn Workload>, f64, &'static str);

/// The workloads asked for.
fn workloads(args: &Args) -> Result<Vec<Planned>, String> {
    let mut out: Vec<Planned> = Vec::new();
    for name in &args.workloads {
        match name.as_str() {
            "llm-d-guide" => out.extend(args.guide_rates.iter().map(|&rate| -> Planned {
                (Box::new(GuideShape { rates: vec![rate], duration_s: args.duration_s }), rate, "req/s")
            })),
            "mixed-chat" => out.extend(args.mixed_rates.iter().map(|&rate| -> Planned {
                (Box::new(MixedChat { rates: vec![rate], duration_s: args.duration_s }), rate, "starts/s")
            })),
            other => return Err(format!("--workloads: unknown workload {other:?} (llm-d-guide, mixed-chat)")),
        }
    }
    Ok(out)
}

fn run(args: &Args) -> Result<(), String> {
    if !(args.time_scale.is_finite() && args.time_scale >= 1.0) {
        return Err(format!("--time-scale must be at least 1, got {}", args.time_scale));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let mut comparisons = Vec::new();
    for (workload, load, unit) in workloads(args)? {
        let scenario = Arc::new(workload.scenario(LoadStep { qps: load }, args.seed));
        let pods = scenario.pods;
        if args.prefill_pods == 0 || args.prefill_pods >= pods {
            return Err(format!("--prefill-pods {}: a fleet of {pods} needs 1 to {}", args.prefill_pods, pods - 1));
        }
        let layout = Layout::Split { prefill: args.prefill_pods };
        let link = Link::for_profile(&scenario.profile);
        eprintln!("{}: {} requests, predicting", workload.name(), scenario.requests.len());
        let (predicted, predicted_outcomes) = predict(&scenario, layout, link, args.seed)?;
        eprintln!("{}: through Envoy at time scale {}", workload.name(), args.time_scale);
        let measured = runtime.block_on(e2e::run(Arc::clone(&scenario), args.prefill_pods, link, args.time_scale));
        let fleet = layout.short(pods);
        let summary = disagg::summarize("pd/infergate", &fleet, &measured.outcomes, scenario.duration_s, Slo::TARGET);
        let trace_path = args.out.join(format!("trace-{}-{load}.jsonl", workload.name()));
        let lines: Vec<String> = measured
            .trace
            .iter()
            .map(|line| e2e::TraceLine {
                predicted: predicted_outcomes.get(line.id).map(e2e::PredictedLine::of),
                ..line.clone()
            })
            .filter_map(|line| serde_json::to_string(&line).ok())
            .collect();
        std::fs::write(&trace_path, lines.join("\n") + "\n").map_err(|e| format!("{}: {e}", trace_path.display()))?;
        comparisons.push(Comparison::new(
            (workload.name(), load, unit, scenario.duration_s),
            args.time_scale,
            (predicted, &predicted_outcomes),
            (summary, &measured),
        ));
    }
    write(args, &comparisons)
}

/// `pd/infergate` (`split: predicted`) on `scenario` in the discrete-event simulator.
fn predict(
    scenario: &Scenario,
    layout: Layout,
    link: Link,
    seed: u64,
) -> Result<(disagg::PdResult, Vec<disagg::PdOutcome>), String> {
    let kind = PolicyKind::Infergate(SplitPolicy::Predicted);
    let fleet = kind.fleet(scenario.pods, layout, link);
    let mut policy = kind.build(&fleet, seed).ok_or("pd/infergate did not build")?;
    let run = disagg::run(scenario, &fleet.config, &fleet.roles, link, policy.as_mut());
    let fleet_name = layout.short(scenario.pods);
    let result = disagg::summarize(&kind.name(), &fleet_name, &run.outcomes, scenario.duration_s, Slo::TARGET);
    Ok((result, run.outcomes))
}

fn write(args: &Args, comparisons: &[Comparison]) -> Result<(), String> {
    let command = format!("target/release/disagg_e2e {}", std::env::args().skip(1).collect::<Vec<_>>().join(" "));
    let text = format!(
        "# Prefill/decode disaggregation end to end: Envoy against the discrete-event prediction\n\n\
         `{command}` (`make bench-disagg-e2e`; seed {}): 8 model-sim pods of Llama-3.1-8B on one H100 each (the long-context engine model), \
         {}, behind real Envoy with the filter in `mode: gateway`, `split: predicted`, and the release agent scraping \
         every 100 simulated ms; a split moves the KV over a {} GB/s link per decode pod. The prediction is `pd/infergate` \
         in the discrete-event simulator (`disagg`) on the very same requests, fleet and link. ITL is the gap between \
         consecutive SSE token events at the client; TTFT the first token event. The target: the measured ITL p90 \
         within {:.0}% of the prediction.\n\n{}",
        args.seed,
        Layout::Split { prefill: args.prefill_pods }.describe(8),
        disagg::LINK_GB_PER_S,
        100.0 * disagg::ITL_TOLERANCE,
        comparison_markdown(comparisons),
    );
    std::fs::write(args.out.join("results.md"), &text).map_err(|e| e.to_string())?;
    let json = serde_json::json!({ "command": command, "seed": args.seed, "workloads": comparisons });
    let json = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
    std::fs::write(args.out.join("results.json"), json + "\n").map_err(|e| e.to_string())?;
    print!("{text}");
    Ok(())
}
