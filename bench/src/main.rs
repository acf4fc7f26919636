//! `infergate-bench`: runs a suite of workloads under every policy and writes the
//! results (JSON, Markdown, charts) to a dated folder.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use infergate_bench::policies::{self, POLICIES};
use infergate_bench::report::{self, PolicyRuns, WorkloadReport};
use infergate_bench::results::RunResult;
use infergate_bench::suite::{self, SuiteKind};
use infergate_bench::workloads::{Agentic, Scenario, TraceReplay, Workload};
use infergate_bench::{des, fleet};

/// Discrete-event benchmark: the model-sim engine in virtual time, routed by each
/// policy (infergate's own router beside the peers' published formulas), on the peers'
/// published workloads. Fixed seeds: the same command gives byte-identical JSON.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// `quick` takes minutes; `full` runs the full sweeps.
    #[arg(long, value_enum, default_value_t = SuiteKind::Quick)]
    suite: SuiteKind,
    /// Where to write results; default bench/results/<date>-<suite>.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seed of every workload generator and policy (the first of `--seeds`).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Runs part 1 with this many seeds, `--seed` and those after it: the tables give
    /// their mean and range, the targets hold on the mean.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=50))]
    seeds: u64,
    /// Only these workloads (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<String>,
    /// Only these policies (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// Parallel runs.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Skip part 2, the end-to-end run through real Envoy.
    #[arg(long)]
    skip_e2e: bool,
    /// Only check that what part 2 starts (Envoy, the filter, the agent) is built.
    #[arg(long)]
    preflight: bool,
    /// Part 2 runs the simulated pods this many times slower than the engine model (and
    /// stretches arrivals alike), to leave CPU for Envoy and the load generator.
    #[arg(long, default_value_t = 1.0, value_parser = positive_scale)]
    e2e_time_scale: f64,
    /// Part 2 also runs infergate with 2, 3, … up to this many gateway replicas
    /// (separate Envoys, one agent); consecutive turns of a conversation go to
    /// different replicas. 1: the single-replica runs only.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=8))]
    e2e_replicas: u16,
    /// Only these part-2 workloads (comma-separated: bursty-chat, shared-prefix,
    /// trace-replay; the last replays the first minute of --trace, or of the default
    /// trace when present, once whatever --e2e-request-sets says).
    #[arg(long, value_delimiter = ',')]
    e2e_workloads: Vec<String>,
    /// Only these part-2 policies (comma-separated: infergate, round_robin,
    /// least_request, random); the replica runs are infergate's.
    #[arg(long, value_delimiter = ',')]
    e2e_policies: Vec<String>,
    /// Part 2 runs each workload on this many request sets, generated from the seed
    /// plus 0, 1, …: a tail measured over several sets (set 0 is the default run's).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    e2e_request_sets: u64,
    /// The trace `trace-replay` replays (Mooncake JSONL); without it, the conversation
    /// trace at ../shared/traces/ when it is there, else the workload is skipped.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Replay speeds of `trace-replay` (its load steps), in place of the suite's.
    #[arg(long, value_delimiter = ',')]
    replay_speeds: Vec<f64>,
    /// Replay only the trace's first this-many seconds (0: all of it), in place of the
    /// suite's window.
    #[arg(long)]
    trace_window: Option<f64>,
    /// The directory of recorded agent sessions `agentic` plays (kv-cache-tester's
    /// trace_*.json); without it, ../shared/traces/agentic when it is there, else the
    /// workload is skipped.
    #[arg(long, value_name = "DIR")]
    agentic: Option<PathBuf>,
    /// Sessions at once of `agentic` (its load steps), in place of the suite's.
    #[arg(long, value_delimiter = ',')]
    agentic_sessions: Vec<f64>,
    /// Seconds `agentic` sends calls for, in place of the suite's.
    #[arg(long)]
    agentic_duration: Option<f64>,
}

/// A scenario made on first use and dropped once its last run is done.
struct LazyScenario {
    scenario: Mutex<Option<Arc<Scenario>>>,
    runs_left: AtomicUsize,
}

impl LazyScenario {
    fn new(runs: usize) -> Self {
        Self { scenario: Mutex::new(None), runs_left: AtomicUsize::new(runs) }
    }

    /// The scenario, made by `make` if no run holds it yet (other callers wait).
    fn get(&self, make: impl FnOnce() -> Scenario) -> Arc<Scenario> {
        let mut slot = self.scenario.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(slot.get_or_insert_with(|| Arc::new(make())))
    }

    /// One run is done with it; the last one frees it.
    fn done(&self) {
        if self.runs_left.fetch_sub(1, Ordering::SeqCst) == 1 {
            *self.scenario.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}

fn today() -> String {
    let days =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() / 86_400) as i64;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `trace-replay`, if it is to run: `Ok(None)` when filtered out, or when no trace was
/// named and the default one is absent (said on stderr).
fn trace_workload(args: &Args) -> Result<Option<TraceReplay>, String> {
    if !(args.workloads.is_empty() || args.workloads.iter().any(|n| n == TraceReplay::NAME)) {
        return Ok(None);
    }
    if let Some(bad) = args.replay_speeds.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
        return Err(format!("--replay-speeds: {bad} is not a speed above 0"));
    }
    if let Some(bad) = args.trace_window.filter(|w| !(w.is_finite() && *w >= 0.0)) {
        return Err(format!("--trace-window: {bad} is not a number of seconds"));
    }
    let path = match &args.trace {
        Some(path) => path.clone(),
        None => {
            let path = PathBuf::from(suite::DEFAULT_TRACE);
            if !path.is_file() {
                eprintln!(
                    "note: skipping {}: no trace at {} (run from the repository root, or pass --trace PATH)",
                    TraceReplay::NAME,
                    path.display()
                );
                return Ok(None);
            }
            path
        }
    };
    let speeds = (!args.replay_speeds.is_empty()).then(|| args.replay_speeds.clone());
    let trace = suite::trace_replay(args.suite, &path, speeds, args.trace_window).map_err(|e| e.to_string())?;
    eprintln!(
        "{}: {} of the {} requests of {} ({}), at speeds {:?}",
        TraceReplay::NAME,
        trace.replayed().count(),
        trace.records().len(),
        path.display(),
        trace.window_s.map_or("the whole trace".to_string(), |w| format!("its first {w} s")),
        trace.speeds,
    );
    Ok(Some(trace))
}

/// `agentic`, if it is to run: `Ok(None)` when filtered out, or when no directory was
/// named and the default one is absent (said on stderr).
fn agentic_workload(args: &Args) -> Result<Option<Agentic>, String> {
    if !(args.workloads.is_empty() || args.workloads.iter().any(|n| n == Agentic::NAME)) {
        return Ok(None);
    }
    if let Some(bad) = args.agentic_sessions.iter().find(|n| !(n.is_finite() && **n >= 1.0)) {
        return Err(format!("--agentic-sessions: {bad} is not a number of sessions"));
    }
    if let Some(bad) = args.agentic_duration.filter(|d| !(d.is_finite() && *d > 0.0)) {
        return Err(format!("--agentic-duration: {bad} is not a number of seconds"));
    }
    let dir = match &args.agentic {
        Some(dir) => dir.clone(),
        None => {
            let dir = PathBuf::from(suite::DEFAULT_AGENTIC);
            if !dir.is_dir() {
                eprintln!(
                    "note: skipping {}: no sessions at {} (run from the repository root, or pass --agentic DIR)",
                    Agentic::NAME,
                    dir.display()
                );
                return Ok(None);
            }
            dir
        }
    };
    let sessions = (!args.agentic_sessions.is_empty()).then(|| args.agentic_sessions.clone());
    let agentic = suite::agentic(args.suite, &dir, sessions, args.agentic_duration).map_err(|e| e.to_string())?;
    eprintln!(
        "{}: {}; {:?} sessions at once, calls sent for {} s",
        Agentic::NAME,
        agentic.describe(),
        agentic.counts,
        agentic.duration_s
    );
    Ok(Some(agentic))
}

/// Part 2's replay of the trace (`--trace`, or the default one when present), unless
/// `--e2e-workloads` leaves it out; asked for by name, a missing trace is an error.
fn e2e_trace(args: &Args) -> Result<Option<TraceReplay>, String> {
    if !(args.e2e_workloads.is_empty() || args.e2e_workloads.iter().any(|n| n == TraceReplay::NAME)) {
        return Ok(None);
    }
    let path = match &args.trace {
        Some(path) => path.clone(),
        None if std::path::Path::new(suite::DEFAULT_TRACE).is_file() => PathBuf::from(suite::DEFAULT_TRACE),
        None if args.e2e_workloads.is_empty() => {
            eprintln!("note: part 2 skips {}: no trace at {}", TraceReplay::NAME, suite::DEFAULT_TRACE);
            return Ok(None);
        }
        None => {
            return Err(format!(
                "--e2e-workloads {}: no trace at {} (run from the repository root, or pass --trace PATH)",
                TraceReplay::NAME,
                suite::DEFAULT_TRACE
            ));
        }
    };
    TraceReplay::load(&path, vec![suite::E2E_TRACE_SPEED], Some(suite::E2E_TRACE_WINDOW_S))
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Part 2: part 1's workloads scaled for real Envoy, beside the discrete-event
/// prediction for the very same requests; infergate also with several replicas.
fn end_to_end(args: &Args, trace: Option<TraceReplay>, out: &std::path::Path) -> Result<String, String> {
    use infergate_bench::e2e;
    use infergate_bench::report::e2e::{E2eRow, e2e_markdown, e2e_sets_markdown, e2e_tail_chart};
    use infergate_envoy_config::UpstreamPolicy;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // infergate again with 2 and 3 gateway replicas, after the single-replica policies.
    let mut runs: Vec<(&str, UpstreamPolicy, usize)> = e2e::POLICIES
        .iter()
        .map(|&(name, policy)| (name, policy, 1))
        .chain((2..=usize::from(args.e2e_replicas)).map(|n| ("infergate", UpstreamPolicy::Infergate, n)))
        .collect();
    runs.retain(|(name, _, _)| args.e2e_policies.is_empty() || args.e2e_policies.iter().any(|p| p == name));
    let mut workloads = suite::e2e_workloads(trace);
    workloads.retain(|(w, _)| args.e2e_workloads.is_empty() || args.e2e_workloads.iter().any(|n| n == w.name()));
    // A trace is the same requests whatever the seed: it runs once.
    let sets_of =
        |workload: &dyn Workload| if workload.name() == TraceReplay::NAME { 1 } else { args.e2e_request_sets };
    let bar = ProgressBar::new(runs.len() as u64 * workloads.iter().map(|(w, _)| sets_of(w.as_ref())).sum::<u64>());
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} end-to-end runs through Envoy {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut markdown = String::from("\n## Part 2: end to end through Envoy\n");
    for (workload, described) in &workloads {
        let step = workload.steps()[0];
        let mut all_rows = Vec::new();
        let sets = sets_of(workload.as_ref());
        for set in 0..sets {
            let seed = suite::e2e_request_set_seed(workload.name(), args.seed, set);
            let scenario = std::sync::Arc::new(workload.scenario(step, seed));
            let fleet = fleet::FleetConfig::new(scenario.pods, &scenario.adapters);
            let mut rows = Vec::new();
            for &(name, policy, replicas) in &runs {
                bar.set_message(format!("{} {name} ×{replicas}, request set {set}", workload.name()));
                let workers = e2e::ENVOY_WORKERS as usize;
                // The agent scrapes and pushes in real time; the pods' times are stretched.
                let scrape_interval_s = e2e::SCRAPE_INTERVAL_MS as f64 / 1000.0 / args.e2e_time_scale;
                let load_exchange_s = e2e::LOAD_EXCHANGE_MS as f64 / 1000.0 / args.e2e_time_scale;
                let mut des_policy = policies::build_behind_replicas(
                    name,
                    scenario.pods,
                    args.seed,
                    &fleet,
                    (workers, replicas, load_exchange_s),
                )
                .ok_or("unknown policy")?;
                let predicted = des::run_scraped_every(&scenario, des_policy.as_mut(), scrape_interval_s);
                let measured =
                    runtime.block_on(e2e::run(std::sync::Arc::clone(&scenario), policy, args.e2e_time_scale, replicas));
                // Set 0 keeps the single-set run's file names.
                let suffix = if set == 0 { String::new() } else { format!("-set{set}") };
                let trace_path = out.join(format!("e2e-trace-{}-{name}-{replicas}{suffix}.jsonl", workload.name()));
                let lines: Vec<String> = measured.trace.iter().filter_map(|l| serde_json::to_string(l).ok()).collect();
                std::fs::write(&trace_path, lines.join("\n") + "\n")
                    .map_err(|e| format!("cannot write {}: {e}", trace_path.display()))?;
                rows.push(E2eRow {
                    policy: name.to_string(),
                    replicas,
                    request_set: set,
                    predicted,
                    measured: measured.result,
                    follow_ups: measured.follow_ups,
                });
                bar.inc(1);
            }
            let described = if sets == 1 { described.to_string() } else { format!("{described}, request set {set}") };
            markdown.push_str(&e2e_markdown(&described, &rows, scenario.requests.len(), args.e2e_time_scale));
            all_rows.extend(rows);
        }
        if sets > 1 {
            markdown.push_str(&e2e_sets_markdown(described, &all_rows));
        }
        e2e_tail_chart(out, workload.name(), step.qps, sets, &all_rows)?;
        let json = serde_json::to_string_pretty(&all_rows).map_err(|e| e.to_string())?;
        let path = out.join(format!("e2e-{}.json", workload.name()));
        std::fs::write(&path, json + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    bar.finish_with_message("done");
    Ok(markdown)
}

/// Names given to `--e2e-policies` and `--e2e-workloads` that part 2 does not know:
/// refused before part 1 runs, rather than silently running nothing.
fn check_e2e_names(args: &Args) -> Result<(), String> {
    let policies: Vec<&str> = infergate_bench::e2e::POLICIES.iter().map(|(name, _)| *name).collect();
    if let Some(unknown) = args.e2e_policies.iter().find(|p| !policies.contains(&p.as_str())) {
        return Err(format!("--e2e-policies: unknown policy `{unknown}`; choose from {}", policies.join(", ")));
    }
    let workloads = suite::E2E_WORKLOAD_NAMES;
    if let Some(unknown) = args.e2e_workloads.iter().find(|w| !workloads.contains(&w.as_str())) {
        return Err(format!("--e2e-workloads: unknown workload `{unknown}`; choose from {}", workloads.join(", ")));
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = check_e2e_names(&args) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    // Part 2's trace is read now, so that a bad one is refused before part 1 runs.
    let e2e_trace = if args.skip_e2e {
        None
    } else {
        match e2e_trace(&args) {
            Ok(trace) => trace,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    };
    // Part 2 starts real Envoy and the agent: find out now, not after part 1.
    if args.preflight || !args.skip_e2e {
        if let Err(code) = infergate_bench::cli::preflight(args.preflight) {
            return code;
        }
    }
    let provenance = infergate_bench::provenance::Provenance::here();
    let mut workloads = suite::workloads(args.suite);
    match trace_workload(&args) {
        Ok(trace) => workloads.extend(trace.map(|t| Box::new(t) as Box<dyn Workload>)),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    match agentic_workload(&args) {
        Ok(agentic) => workloads.extend(agentic.map(|a| Box::new(a) as Box<dyn Workload>)),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    workloads.retain(|w| args.workloads.is_empty() || args.workloads.iter().any(|n| n == w.name()));
    let policy_names: Vec<&str> =
        POLICIES.iter().copied().filter(|p| args.policies.is_empty() || args.policies.iter().any(|n| n == p)).collect();
    if workloads.is_empty() || policy_names.is_empty() {
        eprintln!("error: nothing to run; check --workloads and --policies");
        return ExitCode::from(2);
    }
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "bench/results/{}-{}",
            today(),
            if args.suite == SuiteKind::Quick { "quick" } else { "full" }
        ))
    });
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("error: cannot create {}: {e}", out.display());
        return ExitCode::FAILURE;
    }

    // Every (workload, step) scenario is generated once, when a run first needs it, shared
    // by all policies and dropped after the last: a whole trace's prompts take ~0.6 GB.
    let policies_of = |workload: &dyn Workload| -> Vec<&str> {
        policy_names.iter().copied().filter(|p| workload.runs_policy(p)).collect()
    };
    let seeds: Vec<u64> = (0..args.seeds).map(|k| args.seed + k).collect();
    let scenarios: Vec<(usize, usize, u64, LazyScenario)> = workloads
        .iter()
        .enumerate()
        .flat_map(|(w, workload)| {
            let runs = policies_of(workload.as_ref()).len();
            let steps = workload.steps().len();
            seeds.iter().flat_map(move |&seed| (0..steps).map(move |s| (w, s, seed, LazyScenario::new(runs))))
        })
        .collect();
    let jobs: Vec<(usize, &str)> = scenarios
        .iter()
        .enumerate()
        .flat_map(|(i, (w, _, _, _))| policies_of(workloads[*w].as_ref()).into_iter().map(move |p| (i, p)))
        .collect();
    let bar = ProgressBar::new(jobs.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} runs {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<RunResult>>> = Mutex::new(vec![None; jobs.len()]);
    std::thread::scope(|scope| {
        for _ in 0..args.threads.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&(scenario_index, policy_name)) = jobs.get(i) else { break };
                    let (w, s, seed, lazy) = &scenarios[scenario_index];
                    let workload = &workloads[*w];
                    bar.set_message(format!("{} / {policy_name}, seed {seed}", workload.name()));
                    let scenario = lazy.get(|| {
                        // Seeded by name, so that filtering workloads does not change their requests.
                        let name_seed = xxhash_rust::xxh64::xxh64(workload.name().as_bytes(), *seed);
                        workload.scenario(workload.steps()[*s], name_seed ^ *s as u64)
                    });
                    let fleet = fleet::FleetConfig::new(scenario.pods, &scenario.adapters);
                    let policy = policies::build(policy_name, scenario.pods, *seed, &fleet);
                    let result = policy.map(|mut policy| des::run(&scenario, policy.as_mut()));
                    drop(scenario);
                    lazy.done();
                    let Some(result) = result else { continue };
                    if let Ok(mut slots) = results.lock() {
                        slots[i] = Some(result);
                    }
                    bar.inc(1);
                }
            });
        }
    });
    bar.finish_with_message("done");
    let results = results.into_inner().unwrap_or_default();

    let mut reports = Vec::new();
    for (w, workload) in workloads.iter().enumerate() {
        let steps = workload.steps();
        let policies = policies_of(workload.as_ref())
            .iter()
            .map(|policy| {
                // Per step, each seed's result, in seed order.
                let by_seed: Vec<Vec<RunResult>> = (0..steps.len())
                    .map(|s| {
                        seeds
                            .iter()
                            .filter_map(|seed| {
                                let scenario_index =
                                    scenarios.iter().position(|(sw, ss, sd, _)| *sw == w && *ss == s && sd == seed)?;
                                let job = jobs.iter().position(|(i, p)| *i == scenario_index && p == policy)?;
                                results.get(job).cloned().flatten()
                            })
                            .collect()
                    })
                    .collect();
                PolicyRuns {
                    policy: (*policy).to_string(),
                    runs: by_seed.iter().filter_map(|runs| RunResult::mean_over(runs)).collect(),
                    by_seed: if seeds.len() > 1 { by_seed } else { Vec::new() },
                }
            })
            .collect();
        reports.push(WorkloadReport {
            workload: workload.name().to_string(),
            seed: args.seed,
            seeds: if seeds.len() > 1 { seeds.clone() } else { Vec::new() },
            qps: steps.iter().map(|s| (s.qps * 1000.0).round() / 1000.0).collect(),
            policies,
        });
    }
    for report in &reports {
        let path = out.join(format!("{}.json", report.workload));
        let json = serde_json::to_string_pretty(report).unwrap_or_default();
        if let Err(e) = std::fs::write(&path, json + "\n") {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    let tables = report::markdown(&reports);
    let targets = report::targets(&reports);
    // Where the run came from, beside the results (the per-workload JSON stays the
    // same, byte for byte, for the same seeds).
    let path = out.join("provenance.json");
    if let Err(e) = std::fs::write(&path, serde_json::to_string_pretty(&provenance).unwrap_or_default() + "\n") {
        eprintln!("error: cannot write {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    let mut markdown = format!("Made {}.\n\n## Results\n\n{tables}\n## Targets\n\n{targets}", provenance.line());
    if !args.skip_e2e {
        match end_to_end(&args, e2e_trace, &out) {
            Ok(section) => markdown.push_str(&section),
            Err(e) => {
                eprintln!("error: part 2 failed: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Err(e) = std::fs::write(out.join("results.md"), &markdown) {
        eprintln!("error: cannot write results.md: {e}");
        return ExitCode::FAILURE;
    }
    match report::charts::write_all(&out, &reports) {
        Ok(charts) => eprintln!("charts: {}", charts.join(", ")),
        Err(e) => eprintln!("warning: charts not written: {e}"),
    }
    println!("{markdown}");
    eprintln!("results written to {}", out.display());
    ExitCode::SUCCESS
}

/// A time scale: a finite number above 0.
fn positive_scale(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(scale) if scale.is_finite() && scale > 0.0 => Ok(scale),
        _ => Err(format!("a time scale is a number above 0 (2.0 runs the pods at half speed), not {text:?}")),
    }
}
