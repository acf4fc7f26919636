//! What stands between the clients and the pods in the flow-control benchmark: no
//! queue (today's infergate), a plain first-come queue, the llm-d Router's flow control
//! with its defaults, and infergate's flow control. Each decides, when a request
//! arrives and whenever room may have freed, which requests go to which pod now and
//! which are refused.

use infergate_core::config::{Criticality, Fairness, FlowControlSettings, QueueOrder};
use infergate_core::flow::{FlowQueue, Offer, Refusal, Ticket};
use infergate_model_sim::engine::Engine;

use super::workload::Tag;
use crate::fleet::{FleetConfig, SCRAPE_INTERVAL_S, ScrapeView};
use crate::policies::{GieDefault, Infergate, PickContext, Policy};
use crate::request::BenchRequest;

/// What the simulator holds that a gate may read.
pub struct World<'a> {
    pub requests: &'a [BenchRequest],
    pub tags: &'a [Tag],
    pub engines: &'a [Engine],
    pub scrape: &'a ScrapeView,
    pub in_flight: &'a [u32],
}

impl World<'_> {
    fn context(&self, id: usize, now: f64) -> Option<PickContext<'_>> {
        Some(PickContext {
            id,
            request: self.requests.get(id)?,
            now,
            engines: self.engines,
            scrape: self.scrape,
            in_flight: self.in_flight,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    Dispatch {
        id: usize,
        pod: usize,
    },
    /// Answered without reaching a pod; the reason is the metric label.
    Refuse {
        id: usize,
        reason: &'static str,
    },
}

pub trait Gate {
    fn name(&self) -> &'static str;
    fn on_scrape(&mut self, scrape: &ScrapeView, now: f64);
    fn arrive(&mut self, id: usize, now: f64, world: &World<'_>, out: &mut Vec<Action>);
    /// Room may have freed (a scrape, a first token, a finished request, a tick).
    fn release(&mut self, now: f64, world: &World<'_>, out: &mut Vec<Action>);
    fn on_first_token(&mut self, id: usize, pod: usize, request: &BenchRequest, at: f64);
    fn on_finish(&mut self, id: usize, pod: usize);
    /// How often `release` also runs on its own, seconds.
    fn tick_s(&self) -> Option<f64>;
    /// How often the gate's view of the pods is refreshed: infergate's agent scrapes
    /// every 100 ms by default.
    fn scrape_interval_s(&self) -> f64 {
        SCRAPE_INTERVAL_S
    }
}

/// The names, in report order.
pub const GATES: [&str; 4] = ["no_queue", "fcfs_queue", "llmd_flow_control", "infergate"];

/// The gate `name`; `infergate` runs with `settings`.
pub fn build(name: &str, fleet: &FleetConfig, seed: u64, settings: &FlowControlSettings) -> Option<Box<dyn Gate>> {
    let gate: Box<dyn Gate> = match name {
        "no_queue" => Box::new(NoQueue { router: Infergate::new(fleet, seed) }),
        "fcfs_queue" => Box::new(QueueGate::new("fcfs_queue", fleet, seed, fcfs_settings(), false)),
        "llmd_flow_control" => Box::new(LlmdFlowControl::new(fleet.endpoints.len(), seed)),
        "infergate" => Box::new(QueueGate::new("infergate", fleet, seed, settings.clone(), true)),
        _ => return None,
    };
    Some(gate)
}

/// infergate's flow control at its defaults.
pub fn infergate_settings() -> FlowControlSettings {
    FlowControlSettings { enabled: true, ..Default::default() }
}

/// One first-come line for everyone: no bands, no tenants, the standard band's wait.
fn fcfs_settings() -> FlowControlSettings {
    FlowControlSettings {
        enabled: true,
        fairness: Fairness::RoundRobin,
        order: QueueOrder::FirstCome,
        ..Default::default()
    }
}

fn ms(seconds: f64) -> u64 {
    (seconds * 1000.0).max(0.0) as u64
}

/// Today's infergate: no gateway queue. A saturated pool refuses sheddable requests
/// (429); the others go to the pods and queue there.
pub struct NoQueue {
    router: Infergate,
}

impl Gate for NoQueue {
    fn name(&self) -> &'static str {
        "no_queue"
    }
    fn on_scrape(&mut self, scrape: &ScrapeView, now: f64) {
        self.router.on_scrape(scrape, now);
    }
    fn arrive(&mut self, id: usize, now: f64, world: &World<'_>, out: &mut Vec<Action>) {
        let (Some(ctx), Some(tag)) = (world.context(id, now), world.tags.get(id)) else { return };
        out.push(match self.router.route(&ctx, Some(tag.band)) {
            Ok(pod) => Action::Dispatch { id, pod },
            Err(_) => Action::Refuse { id, reason: "saturated" },
        });
    }
    fn release(&mut self, _now: f64, _world: &World<'_>, _out: &mut Vec<Action>) {}
    fn on_first_token(&mut self, id: usize, pod: usize, request: &BenchRequest, at: f64) {
        self.router.on_first_token(id, pod, request, at);
    }
    fn on_finish(&mut self, id: usize, pod: usize) {
        self.router.on_finish(id, pod);
    }
    fn tick_s(&self) -> Option<f64> {
        None
    }
}

/// A gateway queue in front of infergate's router (`Router::route_or_hold`): the
/// shipped flow control, or with `bands_and_tenants` off a single first-come line.
pub struct QueueGate {
    name: &'static str,
    router: Infergate,
    queue: FlowQueue,
    settings: FlowControlSettings,
    bands_and_tenants: bool,
}

impl QueueGate {
    fn new(
        name: &'static str,
        fleet: &FleetConfig,
        seed: u64,
        settings: FlowControlSettings,
        bands_and_tenants: bool,
    ) -> Self {
        Self { name, router: Infergate::new(fleet, seed), queue: FlowQueue::default(), settings, bands_and_tenants }
    }

    fn ticket(&self, id: usize, now: f64, world: &World<'_>) -> Option<Ticket> {
        let tag = world.tags.get(id)?;
        let request = world.requests.get(id)?;
        let (band, tenant) = if self.bands_and_tenants {
            (tag.band, tag.presented.clone().unwrap_or_else(|| tag.tenant.to_string()))
        } else {
            (Criticality::Standard, String::new())
        };
        let max_wait_ms = self.settings.band(band).max_wait_ms;
        let deadline_ms = if self.bands_and_tenants { tag.ttft_target_ms as u64 } else { max_wait_ms };
        let prompt_tokens = request.prompt.len() as f64 / infergate_core::wire::CHARS_PER_TOKEN as f64;
        Some(Ticket {
            id: id as u64,
            band,
            tenant,
            enqueued_ms: ms(now),
            deadline_ms: ms(now) + deadline_ms,
            expires_ms: ms(now) + max_wait_ms,
            cost_tokens: prompt_tokens + f64::from(request.output_tokens),
        })
    }
}

fn refusal(id: u64, refusal: Refusal) -> Action {
    Action::Refuse { id: id as usize, reason: refusal.as_str() }
}

impl Gate for QueueGate {
    fn name(&self) -> &'static str {
        self.name
    }
    fn on_scrape(&mut self, scrape: &ScrapeView, now: f64) {
        self.router.on_scrape(scrape, now);
    }
    fn arrive(&mut self, id: usize, now: f64, world: &World<'_>, out: &mut Vec<Action>) {
        let Some(ticket) = self.ticket(id, now, world) else { return };
        match self.queue.offer(ticket, &self.settings) {
            Offer::Queued => {}
            Offer::QueuedDisplacing(out_of_place) => out.push(refusal(out_of_place.id, Refusal::Displaced)),
            Offer::Refused(why) => out.push(refusal(id as u64, why)),
        }
        self.release(now, world, out);
    }
    fn release(&mut self, now: f64, world: &World<'_>, out: &mut Vec<Action>) {
        for expired in self.queue.expire(ms(now)) {
            out.push(refusal(expired.id, Refusal::Expired));
        }
        while let Some(head) = self.queue.next(&self.settings) {
            let (id, band) = (head.id, head.band);
            let Some(ctx) = world.context(id as usize, now) else {
                self.queue.remove(id);
                continue;
            };
            match self.router.route_or_hold(&ctx, band, &self.settings) {
                Ok(Some(pod)) => {
                    self.queue.take(id);
                    out.push(Action::Dispatch { id: id as usize, pod });
                }
                Ok(None) => break,
                Err(_) => {
                    self.queue.remove(id);
                    out.push(Action::Refuse { id: id as usize, reason: "no_endpoint" });
                }
            }
        }
    }
    fn on_first_token(&mut self, id: usize, pod: usize, request: &BenchRequest, at: f64) {
        self.router.on_first_token(id, pod, request, at);
    }
    fn on_finish(&mut self, id: usize, pod: usize) {
        self.router.on_finish(id, pod);
    }
    fn tick_s(&self) -> Option<f64> {
        // The filter's tick period.
        Some(0.010)
    }
}

/// The llm-d Router's flow control with its defaults (llm-d-router v0.10.0, tag
/// commit 71f4f099; `pkg/epp/flowcontrol/registry/config.go`, `controller/config.go`,
/// `controller/internal/processor.go`, `saturationdetector/utilization/config.go`):
/// - strict priority between bands; within a band the `global-strict-fairness-policy`
///   (the band is one queue, no fairness between tenants) and `fcfs-ordering-policy`;
/// - 5,000 requests per band, a 60 s TTL; a full band or an expired request is
///   answered 429 (`rejected-saturated`, `rejected-ttl-expired`);
/// - a dispatch cycle on each arrival and every 1 ms releases the head of the highest
///   non-empty band while the pool's saturation is below 1.0: the mean over pods of
///   `max(waiting / 5, kv / 0.8)`, a pod whose metrics are older than 200 ms counting
///   as 1.0. The metrics are the last scrape's: dispatches since do not count;
/// - the released request is scheduled by the default profile (`GieDefault`).
/// - its metrics are refreshed every 50 ms (`pkg/epp/server/options.go`).
pub struct LlmdFlowControl {
    picker: GieDefault,
    queue: FlowQueue,
    settings: FlowControlSettings,
    saturation: f64,
    scraped_at: f64,
}

const LLMD_QUEUE_DEPTH_THRESHOLD: f64 = 5.0;
const LLMD_KV_THRESHOLD: f64 = 0.8;
const LLMD_STALENESS_S: f64 = 0.2;
const LLMD_TTL_MS: u64 = 60_000;
const LLMD_REFRESH_S: f64 = 0.05;
const LLMD_MAX_PER_BAND: u32 = 5_000;

impl LlmdFlowControl {
    fn new(pods: usize, seed: u64) -> Self {
        // Only the TTL is read: release follows llm-d's saturation, not infergate's.
        let band = infergate_core::config::BandSettings { max_wait_ms: Some(LLMD_TTL_MS), ..Default::default() };
        let settings = FlowControlSettings {
            enabled: true,
            fairness: Fairness::RoundRobin,
            order: QueueOrder::FirstCome,
            max_queued: 3 * LLMD_MAX_PER_BAND,
            bands: infergate_core::config::Bands { critical: band, standard: band, sheddable: band },
            ..Default::default()
        };
        Self {
            picker: GieDefault::new(pods, seed),
            queue: FlowQueue::default(),
            settings,
            saturation: 0.0,
            scraped_at: f64::NEG_INFINITY,
        }
    }

    fn saturated(&self, now: f64) -> bool {
        now - self.scraped_at > LLMD_STALENESS_S || self.saturation >= 1.0
    }

    /// One dispatch cycle: the head of the highest band, if the pool has room.
    fn cycle(&mut self, now: f64, world: &World<'_>, out: &mut Vec<Action>) {
        for expired in self.queue.expire(ms(now)) {
            out.push(Action::Refuse { id: expired.id as usize, reason: "expired" });
        }
        if self.saturated(now) {
            return;
        }
        let Some(id) = self.queue.next(&self.settings).map(|t| t.id) else { return };
        self.queue.take(id);
        let Some(ctx) = world.context(id as usize, now) else { return };
        let pod = self.picker.pick(&ctx);
        out.push(Action::Dispatch { id: id as usize, pod });
    }
}

impl Gate for LlmdFlowControl {
    fn name(&self) -> &'static str {
        "llmd_flow_control"
    }
    fn on_scrape(&mut self, scrape: &ScrapeView, now: f64) {
        self.picker.on_scrape(scrape, now);
        let scores: Vec<f64> = scrape
            .signals
            .iter()
            .map(|s| {
                s.as_ref().map_or(1.0, |s| {
                    let waiting = s.waiting.unwrap_or(0.0) / LLMD_QUEUE_DEPTH_THRESHOLD;
                    let kv = s.kv_cache_usage.unwrap_or(0.0) / LLMD_KV_THRESHOLD;
                    waiting.max(kv)
                })
            })
            .collect();
        self.saturation = if scores.is_empty() { 1.0 } else { scores.iter().sum::<f64>() / scores.len() as f64 };
        self.scraped_at = now;
    }
    fn arrive(&mut self, id: usize, now: f64, world: &World<'_>, out: &mut Vec<Action>) {
        let Some(tag) = world.tags.get(id) else { return };
        // Same TTL for every band; no tenants (one flow per band).
        let ticket = Ticket {
            id: id as u64,
            band: tag.band,
            tenant: String::new(),
            enqueued_ms: ms(now),
            deadline_ms: ms(now),
            expires_ms: ms(now) + LLMD_TTL_MS,
            cost_tokens: 0.0,
        };
        if self.queue.queued_in(tag.band) >= LLMD_MAX_PER_BAND as usize {
            out.push(Action::Refuse { id, reason: "queue_full" });
            return;
        }
        self.queue.offer(ticket, &self.settings);
        self.cycle(now, world, out);
    }
    fn release(&mut self, now: f64, world: &World<'_>, out: &mut Vec<Action>) {
        self.cycle(now, world, out);
    }
    fn on_first_token(&mut self, id: usize, pod: usize, request: &BenchRequest, at: f64) {
        self.picker.on_first_token(id, pod, request, at);
    }
    fn on_finish(&mut self, id: usize, pod: usize) {
        self.picker.on_finish(id, pod);
    }
    fn tick_s(&self) -> Option<f64> {
        Some(0.001)
    }
    fn scrape_interval_s(&self) -> f64 {
        LLMD_REFRESH_S
    }
}
