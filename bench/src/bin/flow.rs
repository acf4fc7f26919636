//! `flow`: flow control in the discrete-event simulator. Measures the fleet's capacity,
//! then runs the `tenants` workload (critical, standard and sheddable tenants, one
//! standard tenant noisy at 5× the others; 60 s at 1.5× capacity between two calm
//! spells) behind each gate, and the same requests' shape at half capacity as the
//! unloaded reference. Prints the tables; writes results.json, table.md and flow.svg.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use infergate_bench::fleet::FleetConfig;
use infergate_bench::flow::{self, Attack, FlowResult, GATES, Tenants, infergate_settings};
use infergate_bench::report::bars::Bars;
use infergate_bench::report::panels::policy_panels;
use infergate_bench::report::style::Unit;
use infergate_core::config::{Criticality, FlowControlSettings};

/// Compare gateway queues under overload: no queue, first come, llm-d's flow control, infergate's.
#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Skip the capacity measurement and use this many requests per second.
    #[arg(long)]
    capacity_qps: Option<f64>,
    /// Gates to run, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    gates: Vec<String>,
    /// infergate's `max_engine_waiting` per band, CRITICAL,STANDARD,SHEDDABLE
    /// (default: the shipped defaults).
    #[arg(long, value_delimiter = ',')]
    max_engine_waiting: Vec<f64>,
    /// Instead: run the quick suite's scheduling workloads (every band standard, one
    /// tenant) with and without infergate's gateway queue, to see what the queue
    /// changes where it should not be needed.
    #[arg(long)]
    scheduling_check: bool,
    /// Where to write results.json, table.md and flow.svg.
    #[arg(long, default_value = "bench/results/flow")]
    out: PathBuf,
}

/// Offered when measuring capacity: far above what 4 pods complete.
const CAPACITY_PROBE_QPS: f64 = 200.0;

fn fleet(pods: usize) -> FleetConfig {
    let mut fleet = FleetConfig::new(pods, &[]);
    // The model admits every band; each request's header lowers it to its class.
    for model in &mut fleet.routing.models {
        model.criticality = Criticality::Critical;
    }
    fleet
}

fn run(workload: &Tenants, gate_name: &str, seed: u64, settings: &FlowControlSettings) -> Result<FlowResult, String> {
    let started = Instant::now();
    let (scenario, tags) = workload.scenario(seed);
    let fleet = fleet(scenario.pods);
    let mut gate =
        flow::build(gate_name, &fleet, seed, settings).ok_or_else(|| format!("unknown gate `{gate_name}`"))?;
    let outcomes = flow::run(&scenario, &tags, &fleet, gate.as_mut());
    eprintln!(
        "  {gate_name}: {} requests in {:.1} s of simulated time, {:.1} s",
        scenario.requests.len(),
        scenario.duration_s,
        started.elapsed().as_secs_f64()
    );
    Ok(flow::summarize(gate_name, &outcomes, &tags, scenario.duration_s))
}

/// Requests per second the fleet completes while offered far more, between 10 s and
/// the end of arrivals.
fn capacity(seed: u64) -> f64 {
    let workload = Tenants::constant(CAPACITY_PROBE_QPS, 1.0, 40.0);
    let (scenario, tags) = workload.scenario(seed);
    let fleet = fleet(scenario.pods);
    let Some(mut gate) = flow::build("no_queue", &fleet, seed, &infergate_settings()) else { return 0.0 };
    let outcomes = flow::run(&scenario, &tags, &fleet, gate.as_mut());
    let done = outcomes.iter().filter(|o| o.finished.is_some_and(|t| (10.0..40.0).contains(&t))).count();
    done as f64 / 30.0
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.scheduling_check {
        print!("{}", scheduling_check(args.seed));
        return std::process::ExitCode::SUCCESS;
    }
    let gates: Vec<String> =
        if args.gates.is_empty() { GATES.iter().map(|g| g.to_string()).collect() } else { args.gates.clone() };
    if let Some(unknown) = gates.iter().find(|g| !GATES.contains(&g.as_str())) {
        eprintln!("error: unknown gate `{unknown}`; choose from {}", GATES.join(", "));
        return std::process::ExitCode::FAILURE;
    }
    let capacity_qps = args.capacity_qps.unwrap_or_else(|| {
        eprintln!("measuring capacity: {CAPACITY_PROBE_QPS} req/s offered for 40 s");
        capacity(args.seed)
    });
    eprintln!("capacity: {capacity_qps:.1} req/s");
    match run_all(&args, &gates, capacity_qps) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run_all(args: &Args, gates: &[String], capacity_qps: f64) -> Result<(), String> {
    let mut settings = infergate_settings();
    if let [critical, standard, sheddable] = args.max_engine_waiting[..] {
        settings.bands.critical.max_engine_waiting = Some(critical);
        settings.bands.standard.max_engine_waiting = Some(standard);
        settings.bands.sheddable.max_engine_waiting = Some(sheddable);
    } else if !args.max_engine_waiting.is_empty() {
        return Err("--max-engine-waiting takes three numbers: CRITICAL,STANDARD,SHEDDABLE".into());
    }
    settings.validate_standalone().map_err(|e| e.to_string())?;
    eprintln!("unloaded: 0.5x capacity for 60 s");
    let unloaded_workload = Tenants::constant(capacity_qps, 0.5, 60.0);
    let mut unloaded = Vec::new();
    for gate in gates {
        unloaded.push(run(&unloaded_workload, gate, args.seed, &settings)?);
    }
    let reference = unloaded
        .iter()
        .find(|r| r.gate == "no_queue")
        .or(unloaded.first())
        .and_then(|r| r.classes.get("critical"))
        .map_or(1.0, |g| g.ttft_p90_ms);
    eprintln!("overload: 10 s at 0.5x, 60 s at 1.5x, 20 s at 0.5x");
    let workload = Tenants::overload(capacity_qps);
    let mut overloaded = Vec::new();
    for gate in gates {
        overloaded.push(run(&workload, gate, args.seed, &settings)?);
    }
    // The noisy tenant's attacks change only what a gate with tenant fairness does.
    let mut attacks = Vec::new();
    if gates.iter().any(|g| g == "infergate") {
        eprintln!("attacks on infergate's tenant fairness, under the same overload");
        for attack in Attack::ALL {
            let attacked = Tenants { attack, ..Tenants::overload(capacity_qps) };
            attacks.push((attack, run(&attacked, "infergate", args.seed, &settings)?));
        }
    }
    let header = format!(
        "flow control: {} pods (Llama-3.1-8B on H100, simulated), capacity {capacity_qps:.1} req/s, seed {}\n",
        workload.pods, args.seed
    );
    let table = format!(
        "{header}\n### Overload: 10 s at 0.5x, 60 s at 1.5x, 20 s at 0.5x\n\n{}\n### Unloaded: 0.5x for 60 s\n\n{}\n### Attacks on infergate's tenant fairness, under the same overload\n\n{}",
        flow::markdown(&overloaded, reference),
        flow::markdown(&unloaded, reference),
        flow::attack_markdown(&attacks)
    );
    println!("{table}");
    write(&args.out, &overloaded, &unloaded, &attacks, &table, capacity_qps)
}

fn write(
    dir: &Path,
    overloaded: &[FlowResult],
    unloaded: &[FlowResult],
    attacks: &[(Attack, FlowResult)],
    table: &str,
    capacity_qps: f64,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let attacks: Vec<serde_json::Value> = attacks
        .iter()
        .map(|(attack, result)| serde_json::json!({"attack": attack.describe(), "result": result}))
        .collect();
    let json = serde_json::json!({ "overload": overloaded, "unloaded": unloaded, "attacks": attacks });
    let text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("results.json"), text).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("table.md"), table).map_err(|e| e.to_string())?;
    let per_gate = |value: &dyn Fn(&FlowResult) -> f64| -> Vec<(String, f64)> {
        overloaded.iter().map(|r| (r.gate.clone(), value(r))).collect()
    };
    let critical = per_gate(&|r| r.classes.get("critical").map_or(0.0, |g| g.ttft_p90_ms));
    let jain = per_gate(&|r| r.jain_standard);
    let goodput = per_gate(&|r| r.goodput_per_s);
    let title = format!("tenants, 60 s at 1.5× capacity ({:.1} req/s): four gateway queues", 1.5 * capacity_qps);
    policy_panels(
        &dir.join("flow.svg"),
        &title,
        &[
            Bars {
                title: "critical class (target 500 ms): TTFT p90",
                metric: "TTFT p90",
                unit: Unit::Millis,
                bars: &critical,
            },
            Bars {
                title: "standard tenants: Jain's fairness index (1 = each gets its fair share)",
                metric: "Jain's index",
                unit: Unit::Plain(3),
                bars: &jain,
            },
            Bars {
                title: "goodput: requests answered within their TTFT target",
                metric: "goodput",
                unit: Unit::PerSecond,
                bars: &goodput,
            },
        ],
    )
}

/// The quick suite's scheduling workloads (not the calibration ones, whose pods lie or
/// join late) at each load, through `no_queue` and `infergate`: TTFT percentiles and
/// refusals, as a markdown table.
fn scheduling_check(seed: u64) -> String {
    use infergate_bench::suite::{SuiteKind, workloads};
    let mut out = String::from(
        "| workload | load | gate | requests | refused | TTFT p50 | p90 | p99 | longest held |\n|---|--:|---|--:|--:|--:|--:|--:|--:|\n",
    );
    for workload in workloads(SuiteKind::Quick).iter().filter(|w| !w.name().starts_with("calibration")) {
        for step in workload.steps() {
            let scenario = workload.scenario(step, seed);
            let tags = flow::Tag::untagged(&scenario);
            let fleet = FleetConfig::new(scenario.pods, &scenario.adapters);
            for gate_name in ["no_queue", "infergate"] {
                let Some(mut gate) = flow::build(gate_name, &fleet, seed, &infergate_settings()) else { continue };
                let outcomes = flow::run(&scenario, &tags, &fleet, gate.as_mut());
                let result = flow::summarize(gate_name, &outcomes, &tags, scenario.duration_s);
                let g = result.classes.get("standard").cloned().unwrap_or_default();
                let refused: usize = g.refused.values().sum();
                out.push_str(&format!(
                    "| {} | {} | {gate_name} | {} | {refused} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
                    workload.name(),
                    step.qps,
                    g.offered,
                    g.ttft_p50_ms,
                    g.ttft_p90_ms,
                    g.ttft_p99_ms,
                    g.max_queued_ms
                ));
            }
            eprintln!("  {} at {}: done", workload.name(), step.qps);
        }
    }
    out
}
