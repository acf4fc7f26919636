//! The discrete-event simulation of a fleet with roles, in virtual time. As in `des`,
//! pods step independently and each step's end is an event, as are arrivals,
//! conversation follow-ups and the agent's scrapes; here a split request also has its
//! KV transfer's end.
//!
//! A split request's prefill leg goes to the prefill pod's engine with one output
//! token. When it returns, its KV cache moves to the decode pod: the prompt tokens that
//! pod does not hold now, at `Link::seconds`, after any transfer already on that pod's
//! link. On arrival the decode leg enters the decode pod's engine with the KV it
//! brought, which computes only the prompt's last token; the client's first token is
//! the decode leg's. (vLLM admits the decode leg, reserving its blocks, before it pulls
//! the KV; here the pull comes first, which only matters when the decode pod's cache
//! is full.)
//!
//! Engine request ids carry the leg: `2·id` is the request whole or its decode leg,
//! `2·id + 1` its prefill leg.

use infergate_core::config::PodRole;
use infergate_model_sim::engine::{Engine, EngineEvent, SimRequest};

use super::fleet::Link;
use super::policy::{PdContext, PdPolicy};
use crate::des::{Steps, Timeline, conversation_from, followers_of};
use crate::fleet::{FleetConfig, SCRAPE_INTERVAL_S, Scraper};
use crate::request::{Arrival, BenchRequest};
use crate::workloads::Scenario;

/// What happened to one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PdOutcome {
    pub arrival: f64,
    /// The client's first token (a split request's decode leg's).
    pub first_token: Option<f64>,
    pub finished: Option<f64>,
    pub output_tokens: u32,
    /// The pod that decoded it (served it whole, if not split).
    pub decode_pod: usize,
    /// The prefill leg's pod, if split.
    pub prefill_pod: Option<usize>,
    /// When the prefill leg returned, and when its KV reached the decode pod.
    pub prefill_done: Option<f64>,
    pub transferred: Option<f64>,
    /// Prompt tokens moved over the link.
    pub transferred_tokens: u64,
    /// The gaps between its consecutive tokens, seconds.
    pub gaps: Vec<f32>,
    /// A conversation turn that would have arrived after the end: not sent, not counted.
    pub not_sent: bool,
}

impl PdOutcome {
    pub fn split(&self) -> bool {
        self.prefill_pod.is_some()
    }
}

/// A run's outcomes and the pods' final state.
pub struct PdRun {
    pub outcomes: Vec<PdOutcome>,
    pub engines: Vec<Engine>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    Arrival(usize),
    StepEnd(usize),
    Wake(usize),
    Scrape,
    /// Request `id`'s KV reached its decode pod.
    Transferred(usize),
}

/// Gives up on requests still unfinished this long after arrivals stop.
const DRAIN_LIMIT_S: f64 = 600.0;

/// Runs `scenario` on pods with `roles`, the agent scraping them for `fleet`'s config,
/// split requests' KV crossing `link`, routed by `policy`.
pub fn run(
    scenario: &Scenario,
    fleet: &FleetConfig,
    roles: &[PodRole],
    link: Link,
    policy: &mut dyn PdPolicy,
) -> PdRun {
    let pods = scenario.pods;
    let mut engines: Vec<Engine> = (0..pods)
        .map(|_| {
            let engine = Engine::new(scenario.profile);
            if policy.reads_kv_events() { engine.recording_kv_events() } else { engine }
        })
        .collect();
    let mut steps = Steps::new(pods);
    let mut in_flight = vec![0u32; pods];
    let mut link_free = vec![0.0f64; pods];
    let mut last_token = vec![0.0f64; scenario.requests.len()];
    let mut scraper = Scraper::new(pods);
    let mut scrape = scraper.scrape(&engines, fleet, 0.0);
    policy.on_scrape(&scrape, &engines, 0.0);

    let mut outcomes = vec![PdOutcome::default(); scenario.requests.len()];
    let followers = followers_of(&scenario.requests);
    let mut queue = Timeline::new();
    for (i, request) in scenario.requests.iter().enumerate() {
        if let Arrival::At(t) = request.arrival {
            queue.push(t, Event::Arrival(i));
        }
    }
    queue.push(SCRAPE_INTERVAL_S, Event::Scrape);
    let deadline = scenario.duration_s + DRAIN_LIMIT_S;
    let mut remaining = scenario.requests.len();
    let last_pod = pods.saturating_sub(1);

    while let Some((now, event)) = queue.pop() {
        if now > deadline || remaining == 0 {
            break;
        }
        match event {
            Event::Scrape => {
                scrape = scraper.scrape(&engines, fleet, now);
                policy.on_scrape(&scrape, &engines, now);
                queue.push(now + SCRAPE_INTERVAL_S, Event::Scrape);
            }
            Event::Arrival(id) => {
                let request = &scenario.requests[id];
                let ctx =
                    PdContext { id, request, now, engines: &engines, scrape: &scrape, in_flight: &in_flight, roles };
                let choice = policy.route(&ctx);
                let decode = choice.decode.min(last_pod);
                let prefill = choice.prefill.map(|p| p.min(last_pod)).filter(|&p| p != decode);
                let outcome = &mut outcomes[id];
                outcome.arrival = now;
                outcome.output_tokens = request.output_tokens;
                outcome.decode_pod = decode;
                outcome.prefill_pod = prefill;
                in_flight[decode] += 1;
                let (pod, leg) = match prefill {
                    Some(p) => (p, leg_request(&engines[p], 2 * id + 1, now, request, 1)),
                    None => (decode, leg_request(&engines[decode], 2 * id, now, request, request.output_tokens)),
                };
                in_flight[pod] += u32::from(pod != decode);
                engines[pod].submit(leg);
                steps.start_if_idle(&mut engines[pod], pod, now, &mut queue, Event::StepEnd(pod), Event::Wake(pod));
            }
            Event::Transferred(id) => {
                let request = &scenario.requests[id];
                let decode = outcomes[id].decode_pod;
                outcomes[id].transferred = Some(now);
                let leg = leg_request(&engines[decode], 2 * id, now, request, request.output_tokens);
                engines[decode].submit(leg.with_transferred_kv());
                let (step_end, wake) = (Event::StepEnd(decode), Event::Wake(decode));
                steps.start_if_idle(&mut engines[decode], decode, now, &mut queue, step_end, wake);
            }
            Event::Wake(pod) => {
                steps.start_if_idle(&mut engines[pod], pod, now, &mut queue, Event::StepEnd(pod), Event::Wake(pod));
            }
            Event::StepEnd(pod) => {
                for event in steps.end(pod) {
                    match event {
                        EngineEvent::FirstToken { id: leg, at, .. } if leg % 2 == 1 => {
                            // The prefill leg returned: its KV goes to the decode pod.
                            let id = (leg / 2) as usize;
                            let request = &scenario.requests[id];
                            in_flight[pod] = in_flight[pod].saturating_sub(1);
                            policy.on_prefill_done(id, pod, at);
                            let outcome = &mut outcomes[id];
                            let decode = outcome.decode_pod;
                            let tokens = uncached_tokens(&engines[decode], request);
                            let start = at.max(link_free[decode]);
                            let end = start + link.seconds(tokens);
                            link_free[decode] = end;
                            outcome.prefill_done = Some(at);
                            outcome.transferred_tokens = tokens;
                            queue.push(end, Event::Transferred(id));
                        }
                        EngineEvent::FirstToken { id: leg, at, .. } => {
                            let id = (leg / 2) as usize;
                            outcomes[id].first_token = Some(at);
                            last_token[id] = at;
                            policy.on_first_token(id, pod, &scenario.requests[id], at);
                        }
                        EngineEvent::Token { id: leg, at } if leg % 2 == 0 => {
                            let id = (leg / 2) as usize;
                            outcomes[id].gaps.push((at - last_token[id]) as f32);
                            last_token[id] = at;
                        }
                        EngineEvent::Finished { id: leg, at } if leg % 2 == 0 => {
                            let id = (leg / 2) as usize;
                            outcomes[id].finished = Some(at);
                            in_flight[pod] = in_flight[pod].saturating_sub(1);
                            remaining -= 1;
                            policy.on_finish(id, pod, at);
                            for &(next, think_s) in followers.get(&id).map(Vec::as_slice).unwrap_or_default() {
                                if at + think_s <= scenario.duration_s {
                                    queue.push(at + think_s, Event::Arrival(next));
                                } else {
                                    for turn in conversation_from(next, &followers) {
                                        outcomes[turn].not_sent = true;
                                        remaining -= 1;
                                    }
                                }
                            }
                        }
                        // A prefill leg's one token and its end come with its first.
                        EngineEvent::Token { .. } | EngineEvent::Finished { .. } => {}
                    }
                }
                steps.start(&mut engines[pod], pod, now, &mut queue, Event::StepEnd(pod), Event::Wake(pod));
            }
        }
    }
    PdRun { outcomes, engines }
}

/// One leg of `request` as the engine of `engine`'s pod receives it at `now`.
fn leg_request(engine: &Engine, leg: usize, now: f64, request: &BenchRequest, output_tokens: u32) -> SimRequest {
    SimRequest::from_text(
        leg as u64,
        now,
        &request.prompt.bytes(),
        output_tokens,
        request.adapter.clone(),
        engine.profile().block_size,
    )
}

/// The prompt tokens of `request` that `engine`'s pod does not hold now: what a split
/// moves to it.
fn uncached_tokens(engine: &Engine, request: &BenchRequest) -> u64 {
    let leg = leg_request(engine, 0, 0.0, request, 1);
    let cached = engine.cached_prefix_blocks(&leg.block_hashes) as u64 * u64::from(engine.profile().block_size);
    u64::from(leg.prompt_tokens).saturating_sub(cached.min(u64::from(leg.prompt_tokens) - 1))
}

/// Requests sent to each pod, by the role it served them in: (whole or decode, prefill).
pub fn legs_per_pod(outcomes: &[PdOutcome], pods: usize) -> Vec<(usize, usize)> {
    let mut legs = vec![(0, 0); pods];
    for o in outcomes.iter().filter(|o| !o.not_sent) {
        if let Some(l) = legs.get_mut(o.decode_pod) {
            l.0 += 1;
        }
        if let Some(l) = o.prefill_pod.and_then(|p| legs.get_mut(p)) {
            l.1 += 1;
        }
    }
    legs
}
