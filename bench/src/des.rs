//! The discrete-event simulation of one scenario under one policy, in virtual time.
//! Pods step independently (each step's end is an event); arrivals, conversation
//! follow-ups and the agent's scrapes are events too. Same scenario, same policy, same
//! seed: the same result, byte for byte.
//!
//! A scenario's calibration plan can make every pod report its latencies scaled (its
//! metrics lie about its speed) and hold its last pods out of the fleet until their join
//! time: until then they are in no scrape, and the policies see only the pods present.
//! From its measuring time on, each scrape also samples every pod's queued prefill
//! (`calibration::PrefillShares`).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use infergate_model_sim::engine::{Engine, EngineEvent, SimRequest};

use crate::calibration::{CalibrationResult, PrefillShares};
use crate::fleet::{FleetConfig, SCRAPE_INTERVAL_S, Scraper};
use crate::policies::{PickContext, Policy};
use crate::request::Arrival;
use crate::results::{RequestOutcome, RunResult};
use crate::workloads::Scenario;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    Arrival(usize),
    StepEnd(usize),
    Wake(usize),
    Scrape,
}

#[derive(Debug, Clone, Copy)]
struct Scheduled {
    at: f64,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    /// Earliest first in a max-heap: reversed time, then insertion order.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.total_cmp(&self.at).then(other.seq.cmp(&self.seq))
    }
}

struct Queue {
    heap: BinaryHeap<Scheduled>,
    seq: u64,
}

impl Queue {
    fn push(&mut self, at: f64, event: Event) {
        self.seq += 1;
        self.heap.push(Scheduled { at, seq: self.seq, event });
    }
}

/// Gives up on requests still unfinished this long after arrivals stop.
const DRAIN_LIMIT_S: f64 = 600.0;

pub fn run(scenario: &Scenario, policy: &mut dyn Policy) -> RunResult {
    let sim = simulate(scenario, policy);
    let mut result = RunResult::collect(&sim.outcomes, &sim.engines);
    if let Some(from_s) = scenario.calibration.measure_from_s {
        result.calibration =
            Some(CalibrationResult::measure(from_s, policy.ttft_predictions(), &sim.outcomes, &sim.shares));
    }
    result
}

/// The same run, returning each request's outcome and the pods' final state.
pub fn run_outcomes(scenario: &Scenario, policy: &mut dyn Policy) -> (Vec<RequestOutcome>, Vec<Engine>) {
    let sim = simulate(scenario, policy);
    (sim.outcomes, sim.engines)
}

struct Simulated {
    outcomes: Vec<RequestOutcome>,
    engines: Vec<Engine>,
    /// Sampled at each scrape in the calibration plan's window, while arrivals last.
    shares: PrefillShares,
}

fn simulate(scenario: &Scenario, policy: &mut dyn Policy) -> Simulated {
    let plan = &scenario.calibration;
    let fleet = FleetConfig::new(scenario.pods, &scenario.adapters);
    let mut engines: Vec<Engine> = (0..scenario.pods)
        .map(|_| Engine::new(scenario.profile).reporting_time_scale(plan.reporting_time_scale))
        .collect();
    // The pods policies may pick at `now`: at least the first one.
    let present = |now: f64| plan.present(scenario.pods, now).clamp(1, scenario.pods.max(1));
    let mut shares = PrefillShares::new(scenario.pods);
    let mut stepping = vec![false; scenario.pods];
    let mut pending_steps: Vec<Vec<EngineEvent>> = vec![Vec::new(); scenario.pods];
    let mut in_flight = vec![0u32; scenario.pods];
    let mut scraper = Scraper::new(scenario.pods);
    let mut scrape = scraper.scrape(engines.get(..present(0.0)).unwrap_or_default(), &fleet, 0.0);
    policy.on_scrape(&scrape, 0.0);

    let mut outcomes: Vec<RequestOutcome> = vec![RequestOutcome::default(); scenario.requests.len()];
    let mut followers: HashMap<usize, Vec<(usize, f64)>> = HashMap::new();
    let mut queue = Queue { heap: BinaryHeap::new(), seq: 0 };
    for (i, request) in scenario.requests.iter().enumerate() {
        match request.arrival {
            Arrival::At(t) => queue.push(t, Event::Arrival(i)),
            Arrival::After { previous, think_s } => followers.entry(previous).or_default().push((i, think_s)),
        }
    }
    queue.push(SCRAPE_INTERVAL_S, Event::Scrape);
    let deadline = scenario.duration_s + DRAIN_LIMIT_S;
    let mut remaining = scenario.requests.len();

    while let Some(Scheduled { at: now, event, .. }) = queue.heap.pop() {
        if now > deadline || remaining == 0 {
            break;
        }
        match event {
            Event::Scrape => {
                let here = engines.get(..present(now)).unwrap_or_default();
                if plan.measure_from_s.is_some_and(|from| now >= from) && now <= scenario.duration_s {
                    shares.sample(here);
                }
                scrape = scraper.scrape(here, &fleet, now);
                policy.on_scrape(&scrape, now);
                queue.push(now + SCRAPE_INTERVAL_S, Event::Scrape);
            }
            Event::Arrival(id) => {
                let request = &scenario.requests[id];
                let here = present(now);
                let ctx = PickContext {
                    id,
                    request,
                    now,
                    engines: engines.get(..here).unwrap_or_default(),
                    scrape: &scrape,
                    in_flight: in_flight.get(..here).unwrap_or_default(),
                };
                if !policy.admit(&ctx) {
                    outcomes[id].arrival = now;
                    outcomes[id].shed = true;
                    remaining -= 1;
                    // A shed turn ends its conversation: the user got no answer to follow.
                    for &(next, _) in followers.get(&id).map(Vec::as_slice).unwrap_or_default() {
                        remaining -= skip_conversation(next, &followers, &mut outcomes);
                    }
                    continue;
                }
                let pod = policy.pick(&ctx);
                let pod = pod.min(here - 1);
                outcomes[id].arrival = now;
                outcomes[id].pod = pod;
                outcomes[id].output_tokens = request.output_tokens;
                in_flight[pod] += 1;
                let block_size = engines[pod].profile().block_size;
                engines[pod].submit(SimRequest::from_text(
                    id as u64,
                    now,
                    &request.prompt,
                    request.output_tokens,
                    request.adapter.clone(),
                    block_size,
                ));
                if !stepping[pod] {
                    start_step(&mut engines[pod], pod, now, &mut stepping, &mut pending_steps, &mut queue);
                }
            }
            Event::Wake(pod) => {
                if !stepping[pod] {
                    start_step(&mut engines[pod], pod, now, &mut stepping, &mut pending_steps, &mut queue);
                }
            }
            Event::StepEnd(pod) => {
                stepping[pod] = false;
                for event in std::mem::take(&mut pending_steps[pod]) {
                    match event {
                        EngineEvent::FirstToken { id, at } => {
                            let id = id as usize;
                            outcomes[id].first_token = Some(at);
                            policy.on_first_token(id, pod, &scenario.requests[id], at);
                        }
                        EngineEvent::Finished { id, at } => {
                            let id = id as usize;
                            outcomes[id].finished = Some(at);
                            in_flight[pod] = in_flight[pod].saturating_sub(1);
                            remaining -= 1;
                            policy.on_finish(id, pod);
                            for &(next, think_s) in followers.get(&id).map(Vec::as_slice).unwrap_or_default() {
                                if at + think_s <= scenario.duration_s {
                                    queue.push(at + think_s, Event::Arrival(next));
                                } else {
                                    remaining -= skip_conversation(next, &followers, &mut outcomes);
                                }
                            }
                        }
                        EngineEvent::Token { .. } => {}
                    }
                }
                start_step(&mut engines[pod], pod, now, &mut stepping, &mut pending_steps, &mut queue);
            }
        }
    }
    Simulated { outcomes, engines, shares }
}

/// Marks a turn that would arrive after the end, and the turns after it, as not sent.
fn skip_conversation(
    first: usize,
    followers: &HashMap<usize, Vec<(usize, f64)>>,
    outcomes: &mut [RequestOutcome],
) -> usize {
    let mut skipped = 0;
    let mut stack = vec![first];
    while let Some(id) = stack.pop() {
        if let Some(o) = outcomes.get_mut(id) {
            o.not_sent = true;
        }
        skipped += 1;
        stack.extend(followers.get(&id).into_iter().flatten().map(|(next, _)| *next));
    }
    skipped
}

fn start_step(
    engine: &mut Engine,
    pod: usize,
    now: f64,
    stepping: &mut [bool],
    pending: &mut [Vec<EngineEvent>],
    queue: &mut Queue,
) {
    match engine.step(now) {
        Some(step) => {
            stepping[pod] = true;
            pending[pod] = step.events;
            queue.push(now + step.duration, Event::StepEnd(pod));
        }
        None => {
            if let Some(wake) = engine.wake_at(now) {
                queue.push(wake, Event::Wake(pod));
            }
        }
    }
}

#[cfg(test)]
mod tests;
