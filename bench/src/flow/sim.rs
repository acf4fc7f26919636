//! The flow-control run: the discrete-event fleet of `des`, with a gate between the
//! arrivals and the pods. A request is dispatched, held or refused by the gate; held
//! ones go when the gate releases them (on a scrape, a first token, a finished request
//! or its tick). Same scenario, same gate, same seed: the same result.

use infergate_model_sim::engine::{Engine, EngineEvent};

use super::gates::{Action, Gate, World};
use super::workload::Tag;
use crate::des::{Steps, Timeline, conversation_from, engine_request, followers_of};
use crate::fleet::{FleetConfig, Scraper};
use crate::request::Arrival;
use crate::workloads::Scenario;

/// What became of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FlowOutcome {
    pub arrival: f64,
    pub dispatched: Option<f64>,
    pub first_token: Option<f64>,
    pub finished: Option<f64>,
    /// Answered by the gateway without reaching a pod.
    pub refused: Option<&'static str>,
    /// A conversation's turn that would have come after the end, or after a refused
    /// turn: not sent, not counted.
    pub not_sent: bool,
}

impl FlowOutcome {
    pub fn ttft_ms(&self) -> Option<f64> {
        self.first_token.map(|t| (t - self.arrival) * 1000.0)
    }
    pub fn queued_ms(&self) -> Option<f64> {
        self.dispatched.map(|t| (t - self.arrival) * 1000.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    Arrival(usize),
    StepEnd(usize),
    Wake(usize),
    Scrape,
    Tick,
}

/// Gives up on requests still unfinished this long after arrivals stop.
const DRAIN_LIMIT_S: f64 = 300.0;

pub fn run(scenario: &Scenario, tags: &[Tag], fleet: &FleetConfig, gate: &mut dyn Gate) -> Vec<FlowOutcome> {
    let pods = scenario.pods;
    let mut engines: Vec<Engine> = (0..pods).map(|_| Engine::new(scenario.profile)).collect();
    let mut steps = Steps::new(pods);
    let mut in_flight = vec![0u32; pods];
    let mut scraper = Scraper::new(pods);
    let mut scrape = scraper.scrape(&engines, fleet, 0.0);
    gate.on_scrape(&scrape, 0.0);

    let mut outcomes = vec![FlowOutcome::default(); scenario.requests.len()];
    let followers = followers_of(&scenario.requests);
    // Marks the turns from `first` on as not sent; how many.
    let skip = |first: usize, outcomes: &mut [FlowOutcome]| {
        let turns = conversation_from(first, &followers);
        for &id in &turns {
            if let Some(o) = outcomes.get_mut(id) {
                o.not_sent = true;
            }
        }
        turns.len()
    };
    let mut timeline = Timeline::new();
    for (i, request) in scenario.requests.iter().enumerate() {
        if let Arrival::At(t) = request.arrival {
            timeline.push(t, Event::Arrival(i));
        }
    }
    let scrape_interval_s = gate.scrape_interval_s();
    timeline.push(scrape_interval_s, Event::Scrape);
    if let Some(tick) = gate.tick_s() {
        timeline.push(tick, Event::Tick);
    }
    let deadline = scenario.duration_s + DRAIN_LIMIT_S;
    let mut remaining = scenario.requests.len();
    let mut actions = Vec::new();

    while let Some((now, event)) = timeline.pop() {
        if now > deadline || remaining == 0 {
            break;
        }
        let world =
            World { requests: &scenario.requests, tags, engines: &engines, scrape: &scrape, in_flight: &in_flight };
        match event {
            Event::Scrape => {
                scrape = scraper.scrape(&engines, fleet, now);
                gate.on_scrape(&scrape, now);
                let world = World {
                    requests: &scenario.requests,
                    tags,
                    engines: &engines,
                    scrape: &scrape,
                    in_flight: &in_flight,
                };
                gate.release(now, &world, &mut actions);
                timeline.push(now + scrape_interval_s, Event::Scrape);
            }
            Event::Tick => {
                gate.release(now, &world, &mut actions);
                if let Some(tick) = gate.tick_s() {
                    timeline.push(now + tick, Event::Tick);
                }
            }
            Event::Arrival(id) => {
                outcomes[id].arrival = now;
                gate.arrive(id, now, &world, &mut actions);
            }
            Event::Wake(pod) => {
                steps.start_if_idle(&mut engines[pod], pod, now, &mut timeline, Event::StepEnd(pod), Event::Wake(pod));
            }
            Event::StepEnd(pod) => {
                let mut freed = false;
                for event in steps.end(pod) {
                    match event {
                        EngineEvent::FirstToken { id, at, .. } => {
                            let id = id as usize;
                            outcomes[id].first_token = Some(at);
                            gate.on_first_token(id, pod, &scenario.requests[id], at);
                            freed = true;
                        }
                        EngineEvent::Finished { id, at } => {
                            let id = id as usize;
                            outcomes[id].finished = Some(at);
                            in_flight[pod] = in_flight[pod].saturating_sub(1);
                            remaining -= 1;
                            gate.on_finish(id, pod);
                            freed = true;
                            for &(next, think_s) in followers.get(&id).map(Vec::as_slice).unwrap_or_default() {
                                if at + think_s <= scenario.duration_s {
                                    timeline.push(at + think_s, Event::Arrival(next));
                                } else {
                                    remaining -= skip(next, &mut outcomes);
                                }
                            }
                        }
                        EngineEvent::Token { .. } => {}
                    }
                }
                if freed {
                    let world = World {
                        requests: &scenario.requests,
                        tags,
                        engines: &engines,
                        scrape: &scrape,
                        in_flight: &in_flight,
                    };
                    gate.release(now, &world, &mut actions);
                }
                steps.start(&mut engines[pod], pod, now, &mut timeline, Event::StepEnd(pod), Event::Wake(pod));
            }
        }
        for action in actions.drain(..) {
            match action {
                Action::Refuse { id, reason } => {
                    outcomes[id].refused = Some(reason);
                    remaining -= 1;
                    // A refused turn ends its conversation: the user got no answer.
                    for &(next, _) in followers.get(&id).map(Vec::as_slice).unwrap_or_default() {
                        remaining -= skip(next, &mut outcomes);
                    }
                }
                Action::Dispatch { id, pod } => {
                    let pod = pod.min(pods - 1);
                    outcomes[id].dispatched = Some(now);
                    in_flight[pod] += 1;
                    let request = &scenario.requests[id];
                    let submitted = engine_request(&engines[pod], id, now, request);
                    engines[pod].submit(submitted);
                    steps.start_if_idle(
                        &mut engines[pod],
                        pod,
                        now,
                        &mut timeline,
                        Event::StepEnd(pod),
                        Event::Wake(pod),
                    );
                }
            }
        }
    }
    outcomes
}
