//! Part 3's workload in virtual time: inference-perf's `shared_prefix` shape (groups of
//! prompts sharing a system prompt) against model-sim pods with the [`SMOLLM2_CPU`]
//! profile, for infergate and the baselines, over several seeds. What the real-engine
//! runs (21 minutes each) cannot afford: many seeds, and where each group's requests
//! went. Model-sim pods are independent; the real pods share two cores, so absolute
//! figures differ from part 3's (BENCHMARKS.md).
//!
//! `cargo run --release -p infergate-bench --example des_engines -- [RATE] [SEEDS]
//! [GROUPS] [DURATION_S] [PODS] [POLICIES]` (defaults: 0.7 req/s, 6 seeds, 15 groups,
//! 300 s, 3 pods, `infergate,round_robin,least_request`).

use infergate_bench::engine_runs::SMOLLM2_CPU;
use infergate_bench::request::{Arrival, BenchRequest, render, text};
use infergate_bench::results::{RequestOutcome, RunResult};
use infergate_bench::workloads::{BASE_MODEL, CalibrationPlan, Scenario, poisson};
use infergate_bench::{des, fleet, policies};
use infergate_model_sim::engine::CHARS_PER_TOKEN;

const SYSTEM_PROMPT_TOKENS: usize = 1_000;
const QUESTION_TOKENS: usize = 64;
const PROMPTS_PER_GROUP: usize = 16;
const OUTPUT_TOKENS: u32 = 32;

fn arg<T: std::str::FromStr>(value: Option<String>, default: T, name: &str) -> Result<T, String> {
    value.map_or(Ok(default), |v| v.parse().map_err(|_| format!("{name}: cannot read {v:?}")))
}

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let rate: f64 = arg(args.next(), 0.7, "RATE")?;
    let seeds: u64 = arg(args.next(), 6, "SEEDS")?;
    let groups: usize = arg(args.next(), 15, "GROUPS")?;
    let duration_s: f64 = arg(args.next(), 300.0, "DURATION_S")?;
    let pods: usize = arg(args.next(), 3, "PODS")?;
    let names = args.next().unwrap_or_else(|| "infergate,round_robin,least_request".into());
    println!(
        "{groups} groups × {PROMPTS_PER_GROUP} prompts, {SYSTEM_PROMPT_TOKENS} + {QUESTION_TOKENS} tokens, \
         {rate} req/s for {duration_s} s, {pods} pods: TTFT p50 / p90 / p99 ms, prefix hit rate, \
         requests away from their group's pod\n"
    );
    println!("| seed | policy | p50 | p90 | p99 | hit rate | away |");
    println!("|---|---|--:|--:|--:|--:|--:|");
    for name in names.split(',') {
        let mut pooled = Vec::new();
        let mut hits = 0.0;
        let mut away_all = 0;
        for seed in 0..seeds {
            let (scenario, group_of) = scenario(rate, groups, duration_s, pods, 42 + seed);
            let fleet = fleet::FleetConfig::new(scenario.pods, &scenario.adapters);
            let mut policy = policies::build(name, pods, 42, &fleet).ok_or_else(|| format!("no policy {name}"))?;
            let (outcomes, engines) = des::run_outcomes(&scenario, policy.as_mut());
            let result = RunResult::collect(&outcomes, &engines);
            let away = away_from_group_pod(&outcomes, &group_of, groups);
            println!(
                "| {} | {name} | {:.0} | {:.0} | {:.0} | {:.1}% | {away} of {} |",
                42 + seed,
                result.ttft_ms.p50,
                result.ttft_ms.p90,
                result.ttft_ms.p99,
                100.0 * result.prefix_hit_rate,
                outcomes.len()
            );
            hits += result.prefix_hit_rate;
            away_all += away;
            pooled.extend(outcomes);
        }
        let all = RunResult::from_outcomes(&pooled);
        println!(
            "| pooled | {name} | {:.0} | {:.0} | {:.0} | {:.1}% | {away_all} of {} |",
            all.ttft_ms.p50,
            all.ttft_ms.p90,
            all.ttft_ms.p99,
            100.0 * hits / seeds as f64,
            pooled.len()
        );
    }
    Ok(())
}

/// The requests, and each one's group.
fn scenario(rate: f64, groups: usize, duration_s: f64, pods: usize, seed: u64) -> (Scenario, Vec<usize>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let system: Vec<String> = (0..groups).map(|_| text(&mut rng, SYSTEM_PROMPT_TOKENS * CHARS_PER_TOKEN)).collect();
    let questions: Vec<Vec<String>> = (0..groups)
        .map(|_| (0..PROMPTS_PER_GROUP).map(|_| text(&mut rng, QUESTION_TOKENS * CHARS_PER_TOKEN)).collect())
        .collect();
    let mut group_of = Vec::new();
    let requests = poisson(&mut rng, rate, 0.0, duration_s)
        .into_iter()
        .map(|at| {
            let group = rng.usize(..groups);
            let question = &questions[group][rng.usize(..PROMPTS_PER_GROUP)];
            group_of.push(group);
            BenchRequest {
                arrival: Arrival::At(at),
                model: BASE_MODEL.into(),
                adapter: None,
                prompt: render(&[("system", system[group].as_str()), ("user", question.as_str())]).into(),
                output_tokens: OUTPUT_TOKENS,
                session: None,
            }
        })
        .collect();
    let scenario = Scenario {
        pods,
        profile: SMOLLM2_CPU,
        adapters: Vec::new(),
        requests,
        duration_s,
        calibration: CalibrationPlan::NONE,
    };
    (scenario, group_of)
}

/// Requests served by a pod other than the one that served most of their group.
fn away_from_group_pod(outcomes: &[RequestOutcome], group_of: &[usize], groups: usize) -> usize {
    let served = |o: &&RequestOutcome| !o.not_sent && !o.shed;
    let mut counts = vec![std::collections::HashMap::<usize, usize>::new(); groups];
    for (outcome, &group) in outcomes.iter().zip(group_of).filter(|(o, _)| served(o)) {
        if let Some(count) = counts.get_mut(group) {
            *count.entry(outcome.pod).or_default() += 1;
        }
    }
    let home: Vec<Option<usize>> =
        counts.iter().map(|c| c.iter().max_by_key(|(_, n)| **n).map(|(pod, _)| *pod)).collect();
    outcomes.iter().zip(group_of).filter(|(o, g)| served(o) && home.get(**g).copied().flatten() != Some(o.pod)).count()
}
