//! `disagg`: prefill/decode disaggregation in the discrete-event simulator. Each
//! workload at each load, on 8 pods: aggregated (every pod both) under infergate and
//! the leading aggregated peers, and split into prefill and decode pods under
//! infergate's router (`split: predicted`, `always`, `never`) and the peers' P/D
//! policies. Writes results.json, results.md and the goodput chart.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use infergate_bench::disagg::{
    self, GuideShape, Layout, Link, MixedChat, PdResult, PolicyKind, Slo, WorkloadRuns, goodput_chart, markdown,
};
use infergate_bench::suite::{self, SuiteKind};
use infergate_bench::workloads::{Agentic, Scenario, Workload};

/// Compare P/D routing policies and aggregated routing on the same pods.
#[derive(Parser)]
struct Args {
    /// Where to write results.json, results.md and goodput.{svg,png}.
    #[arg(long, default_value = "bench/results/disagg")]
    out: PathBuf,
    /// Fewer loads and shorter runs (minutes).
    #[arg(long)]
    quick: bool,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Prefill pods of the P/D fleet (of 8), the rest decode; more values add a P/D run
    /// per layout. `3b`: 3 pods that prefill and also serve whole requests, 5 decode.
    #[arg(long, value_delimiter = ',', default_value = "3", value_parser = parse_layout)]
    prefill_pods: Vec<Layout>,
    /// Only these workloads: llm-d-guide, mixed-chat, agentic.
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<String>,
    /// Only these policies (names as in the tables).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// The recorded agent sessions `agentic` plays; default ../shared/traces/agentic.
    #[arg(long, value_name = "DIR")]
    agentic: Option<PathBuf>,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Loads of every workload run, in place of the plan's.
    #[arg(long, value_delimiter = ',')]
    loads: Vec<f64>,
}

/// Loads and durations.
struct Plan {
    guide: (Vec<f64>, f64),
    mixed: (Vec<f64>, f64),
    agentic: (Vec<f64>, f64),
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Plan {
                guide: (vec![8.0, 16.0, 24.0, 32.0, 40.0], 60.0),
                mixed: (vec![15.0, 30.0, 45.0, 60.0], 60.0),
                agentic: (vec![8.0, 16.0, 32.0], 600.0),
            }
        } else {
            Plan {
                guide: (vec![4.0, 8.0, 12.0, 16.0, 20.0, 24.0, 28.0, 32.0, 36.0, 40.0], 180.0),
                mixed: (vec![10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0], 180.0),
                agentic: (vec![8.0, 16.0, 24.0, 32.0, 48.0], 1800.0),
            }
        }
    }
}

/// One policy on one fleet layout: its name in the tables.
#[derive(Clone)]
struct Entry {
    name: String,
    kind: PolicyKind,
    layout: Layout,
}

fn entries(args: &Args, pods: usize) -> Vec<Entry> {
    let mut out = Vec::new();
    for kind in PolicyKind::all() {
        if !kind.disaggregated() {
            out.push(Entry { name: kind.name(), kind, layout: Layout::Aggregated });
            continue;
        }
        for (i, &layout) in args.prefill_pods.iter().enumerate() {
            let name = if i == 0 { kind.name() } else { format!("{} {}", kind.name(), layout.short(pods)) };
            out.push(Entry { name, kind, layout });
        }
    }
    out.retain(|e| args.policies.is_empty() || args.policies.contains(&e.name));
    out
}

/// Each workload to run, with how its load steps read.
type Workloads = Vec<(Box<dyn Workload>, &'static str)>;

fn workloads(args: &Args, plan: &Plan) -> Result<Workloads, String> {
    let wanted = |name: &str| args.workloads.is_empty() || args.workloads.iter().any(|w| w == name);
    let mut out: Workloads = Vec::new();
    if wanted("llm-d-guide") {
        out.push((Box::new(GuideShape { rates: plan.guide.0.clone(), duration_s: plan.guide.1 }), "req/s"));
    }
    if wanted("mixed-chat") {
        out.push((Box::new(MixedChat { rates: plan.mixed.0.clone(), duration_s: plan.mixed.1 }), "starts/s"));
    }
    if wanted(Agentic::NAME) {
        let dir = args.agentic.clone().unwrap_or_else(|| PathBuf::from(suite::DEFAULT_AGENTIC));
        if dir.is_dir() {
            let agentic = suite::agentic(SuiteKind::Quick, &dir, Some(plan.agentic.0.clone()), Some(plan.agentic.1))
                .map_err(|e| e.to_string())?;
            eprintln!("agentic: {}", agentic.describe());
            out.push((Box::new(agentic), "sessions"));
        } else {
            eprintln!("note: skipping agentic: no sessions at {} (pass --agentic DIR)", dir.display());
        }
    }
    Ok(out)
}

/// `--prefill-pods`' values: `3` (3 prefill-only pods) or `3b` (3 pods that do both).
fn parse_layout(value: &str) -> Result<Layout, String> {
    let (count, both) = match value.strip_suffix('b') {
        Some(count) => (count, true),
        None => (value, false),
    };
    let n: usize = count.parse().map_err(|_| format!("`{value}`: a pod count, optionally followed by `b`"))?;
    Ok(if both { Layout::Hybrid { both: n } } else { Layout::Split { prefill: n } })
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

fn run(args: &Args) -> Result<(), String> {
    let started = Instant::now();
    let mut plan = Plan::new(args.quick);
    if !args.loads.is_empty() {
        for steps in [&mut plan.guide.0, &mut plan.mixed.0, &mut plan.agentic.0] {
            steps.clone_from(&args.loads);
        }
    }
    let workloads = workloads(args, &plan)?;
    let pods = 8;
    for layout in &args.prefill_pods {
        match *layout {
            Layout::Split { prefill } if prefill == 0 || prefill >= pods => {
                return Err(format!(
                    "--prefill-pods {prefill}: a P/D fleet of {pods} needs 1 to {} prefill pods",
                    pods - 1
                ));
            }
            Layout::Hybrid { both } if both == 0 || both > pods => {
                return Err(format!("--prefill-pods {both}b: a fleet of {pods} has 1 to {pods} pods that do both"));
            }
            _ => {}
        }
    }
    let entries = entries(args, pods);
    if entries.is_empty() {
        return Err("no policy matches --policies".into());
    }
    let total: usize = workloads.iter().map(|(w, _)| w.steps().len() * entries.len()).sum();
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} runs {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut all = Vec::new();
    for (workload, unit) in &workloads {
        let steps = workload.steps();
        let mut per_policy: Vec<Vec<PdResult>> = vec![Vec::new(); entries.len()];
        for step in &steps {
            let scenario = Arc::new(workload.scenario(*step, args.seed));
            bar.set_message(format!("{} at {} {unit}", workload.name(), step.qps));
            let results = run_step(&scenario, &entries, args, &bar);
            for (list, result) in per_policy.iter_mut().zip(results) {
                list.push(result);
            }
        }
        all.push(WorkloadRuns {
            workload: workload.name().to_string(),
            load_unit: (*unit).to_string(),
            loads: steps.iter().map(|s| s.qps).collect(),
            policies: entries.iter().map(|e| e.name.clone()).zip(per_policy).collect(),
        });
    }
    bar.finish_with_message("done");
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!("{total} runs in {elapsed:.0} s");
    write(args, &plan, &all, pods, elapsed)
}

/// Every entry on `scenario`, `args.threads` at a time, in entry order.
fn run_step(scenario: &Scenario, entries: &[Entry], args: &Args, bar: &ProgressBar) -> Vec<PdResult> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<PdResult>>> = Mutex::new(vec![None; entries.len()]);
    std::thread::scope(|scope| {
        for _ in 0..args.threads.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(entry) = entries.get(i) else { break };
                    let result = run_one(scenario, entry, args.seed);
                    if let Some(slot) = results.lock().unwrap_or_else(|e| e.into_inner()).get_mut(i) {
                        *slot = Some(result);
                    }
                    bar.inc(1);
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.into_iter().zip(entries).map(|(r, e)| r.unwrap_or_else(|| empty(&e.name))).collect()
}

fn run_one(scenario: &Scenario, entry: &Entry, seed: u64) -> PdResult {
    let link = Link::for_profile(&scenario.profile);
    let fleet = entry.kind.fleet(scenario.pods, entry.layout, link);
    let Some(mut policy) = entry.kind.build(&fleet, seed) else { return empty(&entry.name) };
    let run = disagg::run(scenario, &fleet.config, &fleet.roles, link, policy.as_mut());
    let layout = if entry.kind.disaggregated() { entry.layout } else { Layout::Aggregated };
    disagg::summarize(&entry.name, &layout.short(scenario.pods), &run.outcomes, scenario.duration_s, Slo::TARGET)
}

fn empty(name: &str) -> PdResult {
    disagg::summarize(name, "-", &[], 1.0, Slo::TARGET)
}

/// A line saying what `workload` sends in `plan`.
fn describe(workload: &str, plan: &Plan) -> String {
    match workload {
        "llm-d-guide" => format!(
            "- `llm-d-guide`: llm-d's P/D guide shape, random 5,000-token prompts and 250 output tokens, Poisson, {} s of arrivals.\n",
            plan.guide.1
        ),
        "mixed-chat" => format!(
            "- `mixed-chat`: per start, 70% a chat of 1–4 turns (300-token system prompt of 16, ~300-token questions, \
             ~200 output tokens, 2–10 s apart), 30% a ~6,000-token document (2,000–16,000) with ~250 output tokens; \
             about 2 requests per start; {} s.\n",
            plan.mixed.1
        ),
        _ => format!(
            "- `{workload}`: the recorded coding-agent sessions of ../shared/traces/agentic, N users at once, {} s.\n",
            plan.agentic.1
        ),
    }
}

fn write(args: &Args, plan: &Plan, runs: &[WorkloadRuns], pods: usize, elapsed_s: f64) -> Result<(), String> {
    let dir = &args.out;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let layouts: Vec<String> = args.prefill_pods.iter().map(|l| l.describe(pods)).collect();
    let header = format!(
        "# Prefill/decode disaggregation, discrete-event ({} suite, seed {})\n\n\
         `disagg {}`: {pods} pods of Llama-3.1-8B on one H100 each (the long-context engine model; agentic: its FP8-KV variant). \
         Aggregated policies (`agg/`) run all {pods} pods as prefill+decode; P/D policies (`pd/`) run {}. \
         A split moves the prompt tokens the decode pod lacks over a {} GB/s link per decode pod, one transfer at a time \
         (131,072 bytes/token; 65,536 with the FP8 KV cache). Objective: TTFT ≤ {} ms and the request's own ITL p90 ≤ {} ms; \
         goodput = requests meeting it per second of arrivals. {} runs took {:.0} s.\n\n{}\n",
        if args.quick { "quick" } else { "full" },
        args.seed,
        std::env::args().skip(1).collect::<Vec<_>>().join(" "),
        layouts.join(", then "),
        disagg::LINK_GB_PER_S,
        Slo::TARGET.ttft_ms,
        Slo::TARGET.itl_p90_ms,
        runs.iter().map(|w| w.loads.len() * w.policies.len()).sum::<usize>(),
        elapsed_s,
        runs.iter().map(|w| describe(&w.workload, plan)).collect::<String>(),
    );
    let text = format!("{header}{}", markdown(runs));
    std::fs::write(dir.join("results.md"), &text).map_err(|e| e.to_string())?;
    let json = serde_json::json!({
        "suite": if args.quick { "quick" } else { "full" },
        "seed": args.seed,
        "pods": pods,
        "layouts": layouts,
        "link_gb_per_s": disagg::LINK_GB_PER_S,
        "slo": Slo::TARGET,
        "workloads": runs,
    });
    let json = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("results.json"), json).map_err(|e| e.to_string())?;
    let title = format!(
        "goodput (TTFT ≤ 2 s, ITL p90 ≤ 50 ms), {pods} pods: P/D {} solid, aggregated dashed",
        args.prefill_pods.first().copied().unwrap_or(Layout::Split { prefill: 3 }).short(pods)
    );
    goodput_chart(dir, "goodput", &title, runs)?;
    print!("{text}");
    Ok(())
}
