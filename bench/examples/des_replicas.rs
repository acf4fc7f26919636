//! infergate behind 1, 2, … gateway replicas in virtual time, over several request
//! sets of a part-2 workload: what part 2's replica runs predict, without the noise of
//! runs through Envoy. Each replica is its own router; they exchange prefix claims and
//! loads at each scrape, as the agent's snapshot pushes do, and loads alone every
//! LOAD_MS between scrapes, as its load pushes do (`policies::InfergateReplicas`).
//!
//! `cargo run --release -p infergate-bench --example des_replicas -- [WORKLOAD] [SETS]
//! [REPLICAS] [SCRAPE_MS] [LOAD_MS] [EXCHANGE]` (defaults: shared-prefix, 12, 3, part
//! 2's 50 ms and 5 ms, `agent`; LOAD_MS 0: snapshots only). EXCHANGE is `agent` (as the product does), `no-shares` (the same exchange,
//! no replica told its place) or `one-ledger` (every replica sees the others' requests
//! at once: the bound no exchange reaches). Set 0 is the one part 2 runs with seed 42.

use infergate_bench::policies::{Exchange, InfergateReplicas};
use infergate_bench::request::{Arrival, BenchRequest};
use infergate_bench::results::{RequestOutcome, RunResult};
use infergate_bench::workloads::TraceReplay;
use infergate_bench::{des, e2e, fleet, suite};

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "shared-prefix".into());
    let sets: u64 = args.next().map_or(Ok(12), |s| s.parse()).map_err(|e| format!("SETS: {e}"))?;
    let most: usize = args.next().map_or(Ok(3), |s| s.parse()).map_err(|e| format!("REPLICAS: {e}"))?;
    let scrape_ms: u64 =
        args.next().map_or(Ok(e2e::SCRAPE_INTERVAL_MS), |s| s.parse()).map_err(|e| format!("SCRAPE_MS: {e}"))?;
    let load_ms: f64 =
        args.next().map_or(Ok(e2e::LOAD_EXCHANGE_MS as f64), |s| s.parse()).map_err(|e| format!("LOAD_MS: {e}"))?;
    let exchange = match args.next().as_deref() {
        None | Some("agent") => Exchange::Agent,
        Some("no-shares") => Exchange::AgentWithoutShares,
        Some("one-ledger") => Exchange::OneLedger,
        Some(other) => return Err(format!("EXCHANGE is agent, no-shares or one-ledger, not {other}")),
    };
    let trace = (name == TraceReplay::NAME)
        .then(|| {
            let path = std::path::Path::new(suite::DEFAULT_TRACE);
            TraceReplay::load(path, vec![suite::E2E_TRACE_SPEED], Some(suite::E2E_TRACE_WINDOW_S))
        })
        .transpose()
        .map_err(|e| format!("{}: {e}", suite::DEFAULT_TRACE))?;
    let (workload, _) = suite::e2e_workloads(trace)
        .into_iter()
        .find(|(w, _)| w.name() == name)
        .ok_or_else(|| format!("no part-2 workload named {name}"))?;
    let step = workload.steps()[0];
    println!(
        "{name}, scraped every {scrape_ms} ms, exchange {exchange:?}: infergate's TTFT p90 / p99 in simulated ms, the requests \
         over 1 s and the follow-up turns on their conversation's pod, by replicas\n"
    );
    println!("| request set | {} |", (1..=most).map(|n| n.to_string()).collect::<Vec<_>>().join(" | "));
    println!("|---|{}", "---:|".repeat(most));
    let mut pooled: Vec<(Vec<RequestOutcome>, (usize, usize))> = vec![Default::default(); most];
    for set in 0..sets {
        let seed = suite::e2e_request_set_seed(&name, 42, set);
        let scenario = workload.scenario(step, seed);
        let fleet = fleet::FleetConfig::new(scenario.pods, &scenario.adapters);
        let mut cells = Vec::new();
        for (replicas, (all, pooled_follow_ups)) in (1..=most).zip(pooled.iter_mut()) {
            let mut policy = InfergateReplicas::exchanging(&fleet, 42, replicas, exchange)
                .with_load_exchange(Some(load_ms / 1000.0));
            let (outcomes, _) = des::run_outcomes_scraped_every(&scenario, &mut policy, scrape_ms as f64 / 1000.0);
            let (kept, sent) = follow_ups(&scenario.requests, &outcomes);
            cells.push(format!("{} ({})", p90_p99(&outcomes), share((kept, sent))));
            *pooled_follow_ups = (pooled_follow_ups.0 + kept, pooled_follow_ups.1 + sent);
            all.extend(outcomes);
        }
        println!("| {set} | {} |", cells.join(" | "));
    }
    let pooled: Vec<String> = pooled.iter().map(|(all, kept)| format!("{} ({})", p90_p99(all), share(*kept))).collect();
    println!("| pooled | {} |", pooled.join(" | "));
    Ok(())
}

/// Follow-up turns served by the pod that served their previous turn, and all sent.
fn follow_ups(requests: &[BenchRequest], outcomes: &[RequestOutcome]) -> (usize, usize) {
    let sent = |o: &&RequestOutcome| !o.not_sent && !o.shed && o.first_token.is_some();
    let (mut kept, mut all) = (0, 0);
    for (request, outcome) in requests.iter().zip(outcomes) {
        if let (Arrival::After { previous, .. }, true) = (request.arrival, sent(&outcome)) {
            all += 1;
            kept += usize::from(outcomes.get(previous).is_some_and(|p| p.pod == outcome.pod));
        }
    }
    (kept, all)
}

fn share((kept, all): (usize, usize)) -> String {
    if all == 0 { "no follow-ups".into() } else { format!("{:.1}%", 100.0 * kept as f64 / all as f64) }
}

/// TTFT p90 / p99, and how many first tokens took over a second.
fn p90_p99(outcomes: &[RequestOutcome]) -> String {
    let ttft = RunResult::from_outcomes(outcomes).ttft_ms;
    let slow = outcomes.iter().filter(|o| o.first_token.is_some_and(|t| t - o.arrival > 1.0)).count();
    format!("{:.0} / {:.0}, {slow} over 1 s", ttft.p90, ttft.p99)
}
