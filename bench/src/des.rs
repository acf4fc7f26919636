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
use crate::request::{Arrival, BenchRequest};
use crate::results::{PrefixBelief, RequestOutcome, RunResult};
use crate::workloads::Scenario;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    Arrival(usize),
    StepEnd(usize),
    Wake(usize),
    Scrape,
}

/// One event at its time; `seq` keeps events at equal times in insertion order.
#[derive(Debug, Clone, Copy)]
struct Scheduled<E> {
    at: f64,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<E> Eq for Scheduled<E> {}
impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Scheduled<E> {
    /// Earliest first in a max-heap: reversed time, then insertion order.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.total_cmp(&self.at).then(other.seq.cmp(&self.seq))
    }
}

/// The pending events of a simulation, earliest first.
pub(crate) struct Timeline<E> {
    heap: BinaryHeap<Scheduled<E>>,
    seq: u64,
}

impl<E> Timeline<E> {
    pub(crate) fn new() -> Self {
        Self { heap: BinaryHeap::new(), seq: 0 }
    }

    pub(crate) fn push(&mut self, at: f64, event: E) {
        self.seq += 1;
        self.heap.push(Scheduled { at, seq: self.seq, event });
    }

    pub(crate) fn pop(&mut self) -> Option<(f64, E)> {
        self.heap.pop().map(|s| (s.at, s.event))
    }
}

/// Gives up on requests still unfinished this long after arrivals stop.
const DRAIN_LIMIT_S: f64 = 600.0;

/// Runs with the policy's own scrape interval (the agent's default unless it has one).
pub fn run(scenario: &Scenario, policy: &mut dyn Policy) -> RunResult {
    let interval = policy.scrape_interval_s().unwrap_or(SCRAPE_INTERVAL_S);
    run_scraped_every(scenario, policy, interval)
}

/// The same, with the agent scraping every `scrape_interval_s` (part 2's agent scrapes
/// more often than the product's default, and its prediction models the same).
pub fn run_scraped_every(scenario: &Scenario, policy: &mut dyn Policy, scrape_interval_s: f64) -> RunResult {
    let sim = simulate(scenario, policy, scrape_interval_s);
    let mut result = RunResult::collect(&sim.outcomes, &sim.engines);
    if let Some(from_s) = scenario.calibration.measure_from_s {
        result.calibration =
            Some(CalibrationResult::measure(from_s, policy.ttft_predictions(), &sim.outcomes, &sim.shares));
    }
    result.prefix_belief = policy.prefix_beliefs().map(|beliefs| PrefixBelief::measure(beliefs, &sim.outcomes));
    result
}

/// The same run, returning each request's outcome and the pods' final state.
pub fn run_outcomes(scenario: &Scenario, policy: &mut dyn Policy) -> (Vec<RequestOutcome>, Vec<Engine>) {
    let interval = policy.scrape_interval_s().unwrap_or(SCRAPE_INTERVAL_S);
    run_outcomes_scraped_every(scenario, policy, interval)
}

/// [`run_outcomes`] with the agent scraping every `scrape_interval_s`.
pub fn run_outcomes_scraped_every(
    scenario: &Scenario,
    policy: &mut dyn Policy,
    scrape_interval_s: f64,
) -> (Vec<RequestOutcome>, Vec<Engine>) {
    let sim = simulate(scenario, policy, scrape_interval_s);
    (sim.outcomes, sim.engines)
}

struct Simulated {
    outcomes: Vec<RequestOutcome>,
    engines: Vec<Engine>,
    /// Sampled at each scrape in the calibration plan's window, while arrivals last.
    shares: PrefillShares,
}

fn simulate(scenario: &Scenario, policy: &mut dyn Policy, scrape_interval_s: f64) -> Simulated {
    let plan = &scenario.calibration;
    let fleet = FleetConfig::new(scenario.pods, &scenario.adapters);
    let mut engines: Vec<Engine> = (0..scenario.pods)
        .map(|_| {
            let engine = Engine::new(scenario.profile).reporting_time_scale(plan.reporting_time_scale);
            if policy.reads_kv_events() { engine.recording_kv_events() } else { engine }
        })
        .collect();
    // The pods policies may pick at `now`: at least the first one.
    let present = |now: f64| plan.present(scenario.pods, now).clamp(1, scenario.pods.max(1));
    let mut shares = PrefillShares::new(scenario.pods);
    let mut steps = Steps::new(scenario.pods);
    let mut in_flight = vec![0u32; scenario.pods];
    let mut scraper = Scraper::new(scenario.pods);
    let mut scrape = scraper.scrape(engines.get(..present(0.0)).unwrap_or_default(), &fleet, 0.0);
    policy.on_scrape(&scrape, 0.0);

    let mut outcomes: Vec<RequestOutcome> = vec![RequestOutcome::default(); scenario.requests.len()];
    let followers = followers_of(&scenario.requests);
    let mut queue = Timeline::new();
    for (i, request) in scenario.requests.iter().enumerate() {
        if let Arrival::At(t) = request.arrival {
            queue.push(t, Event::Arrival(i));
        }
    }
    queue.push(scrape_interval_s, Event::Scrape);
    let deadline = scenario.duration_s + DRAIN_LIMIT_S;
    let mut remaining = scenario.requests.len();

    while let Some((now, event)) = queue.pop() {
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
                queue.push(now + scrape_interval_s, Event::Scrape);
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
                let submitted = engine_request(&engines[pod], id, now, request);
                engines[pod].submit(submitted);
                steps.start_if_idle(&mut engines[pod], pod, now, &mut queue, Event::StepEnd(pod), Event::Wake(pod));
            }
            Event::Wake(pod) => {
                steps.start_if_idle(&mut engines[pod], pod, now, &mut queue, Event::StepEnd(pod), Event::Wake(pod));
            }
            Event::StepEnd(pod) => {
                for event in steps.end(pod) {
                    match event {
                        EngineEvent::FirstToken { id, at, cached_tokens } => {
                            let id = id as usize;
                            outcomes[id].first_token = Some(at);
                            outcomes[id].cached_tokens = cached_tokens;
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
                steps.start(&mut engines[pod], pod, now, &mut queue, Event::StepEnd(pod), Event::Wake(pod));
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
    let turns = conversation_from(first, followers);
    for &id in &turns {
        if let Some(o) = outcomes.get_mut(id) {
            o.not_sent = true;
        }
    }
    turns.len()
}

/// A turn and every turn that follows it in its conversation.
pub(crate) fn conversation_from(first: usize, followers: &HashMap<usize, Vec<(usize, f64)>>) -> Vec<usize> {
    let mut turns = Vec::new();
    let mut stack = vec![first];
    while let Some(id) = stack.pop() {
        turns.push(id);
        stack.extend(followers.get(&id).into_iter().flatten().map(|(next, _)| *next));
    }
    turns
}

/// Each turn's next turns and their think times, from the requests' arrivals.
pub(crate) fn followers_of(requests: &[BenchRequest]) -> HashMap<usize, Vec<(usize, f64)>> {
    let mut followers: HashMap<usize, Vec<(usize, f64)>> = HashMap::new();
    for (i, request) in requests.iter().enumerate() {
        if let Arrival::After { previous, think_s } = request.arrival {
            followers.entry(previous).or_default().push((i, think_s));
        }
    }
    followers
}

/// A benchmark request as the engine of `engine`'s pod receives it at `now`.
pub(crate) fn engine_request(engine: &Engine, id: usize, now: f64, request: &BenchRequest) -> SimRequest {
    SimRequest::from_text(
        id as u64,
        now,
        &request.prompt.bytes(),
        request.output_tokens,
        request.adapter.clone(),
        engine.profile().block_size,
    )
}

/// Which pods are mid-step, and what each running step will have produced at its end.
pub(crate) struct Steps {
    stepping: Vec<bool>,
    pending: Vec<Vec<EngineEvent>>,
}

impl Steps {
    pub(crate) fn new(pods: usize) -> Self {
        Self { stepping: vec![false; pods], pending: vec![Vec::new(); pods] }
    }

    /// The pod's step ended: what it produced.
    pub(crate) fn end(&mut self, pod: usize) -> Vec<EngineEvent> {
        if let Some(s) = self.stepping.get_mut(pod) {
            *s = false;
        }
        self.pending.get_mut(pod).map(std::mem::take).unwrap_or_default()
    }

    /// Starts the pod's next step unless one is running.
    pub(crate) fn start_if_idle<E>(
        &mut self,
        engine: &mut Engine,
        pod: usize,
        now: f64,
        timeline: &mut Timeline<E>,
        step_end: E,
        wake: E,
    ) {
        if !self.stepping.get(pod).copied().unwrap_or(true) {
            self.start(engine, pod, now, timeline, step_end, wake);
        }
    }

    /// Starts the pod's next step if it has work: its end becomes an event, or, idle
    /// until a request's time comes, a wake-up does.
    pub(crate) fn start<E>(
        &mut self,
        engine: &mut Engine,
        pod: usize,
        now: f64,
        timeline: &mut Timeline<E>,
        step_end: E,
        wake: E,
    ) {
        match engine.step(now) {
            Some(step) => {
                if let (Some(s), Some(p)) = (self.stepping.get_mut(pod), self.pending.get_mut(pod)) {
                    *s = true;
                    *p = step.events;
                }
                timeline.push(now + step.duration, step_end);
            }
            None => {
                if let Some(at) = engine.wake_at(now) {
                    timeline.push(at, wake);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
