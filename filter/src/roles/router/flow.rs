//! The gateway queue on this worker (`flow_control:` in `infergate.yaml`).
//!
//! Each pool's queue is one `FlowQueue` in shared data, `infergate.flow.<pool>`,
//! updated with compare-and-swap by every worker: one order and one bound for the whole
//! Envoy. A held request stays paused on the worker that received it, and only that
//! worker can resume or answer it, so a ticket's id carries its worker's tag and its
//! stream's context id. Each worker, on its tick (every 5 ms while it holds
//! anything), answers its own expired or displaced requests, and releases the queue's
//! head while the head is its own and the router finds room for it: the pod is chosen
//! then, from the signals of that moment, and the stream is resumed with its routing
//! headers set. A head held by another worker waits for that worker's tick.
//!
//! Each worker marks itself alive in the queues it holds requests in (every
//! [`BEAT_MS`]); any worker removes the tickets of a worker silent for
//! [`ORPHAN_SILENCE_MS`] (one torn down, or one whose removal of its own ticket failed
//! and that then stopped ticking), and a worker removes its own tickets that no held
//! stream matches any more.

use std::cell::RefCell;
use std::collections::BTreeMap;

use infergate_core::ApiError;
use infergate_core::config::{Criticality, FlowControlSettings};
use infergate_core::flow::{FlowQueue, Offer, Refusal, Ticket, holder_of};
use infergate_core::request::InferenceRequest;
use infergate_core::wire::shared_data::FLOW_PREFIX;

use super::metrics::FlowMetrics;
use super::request::RoutedSlot;
use crate::host::{Host, UpdateError};

/// A worker silent this long in a queue has its tickets there removed.
pub const ORPHAN_SILENCE_MS: u64 = 1_000;
/// How often a worker holding requests in a queue marks itself alive there.
pub const BEAT_MS: u64 = 100;
/// Releases per pool per tick at most, so that one tick stays short.
const MAX_RELEASES_PER_TICK: usize = 256;

/// A request this worker holds, paused, until its release or its answer.
pub struct Held {
    pub request: InferenceRequest,
    pub band: Criticality,
    pub pool: String,
    pub enqueued_ms: u64,
    pub expires_ms: u64,
    pub prompt_chars: usize,
    /// Where the stream finds its routing once released.
    pub slot: RoutedSlot,
}

/// What the router made of a held request offered for release.
pub enum Attempt<T> {
    Routed(T),
    /// No room yet: it stays held, and so does everything behind it.
    Hold,
    /// It cannot be routed at all (its model left the config).
    Fail(ApiError),
}

/// What becomes of a held stream after a tick.
pub enum Outcome<T> {
    /// Routed: set its headers and resume it.
    Release { context_id: u32, held: Held, routed: T },
    /// Answer it with `error`; `undo` is a routing made for it that must be released.
    Answer { context_id: u32, error: ApiError, undo: Option<T> },
    /// A routing made for a request that stays held (or whose stream is gone): release
    /// it.
    Undo(T),
}

pub struct FlowGate {
    worker_tag: u64,
    /// By stream context id.
    held: RefCell<BTreeMap<u32, Held>>,
    metrics: FlowMetrics,
}

fn key(pool: &str) -> String {
    format!("{FLOW_PREFIX}{pool}")
}

impl FlowGate {
    pub fn new(worker_tag: u32, metrics: FlowMetrics) -> Self {
        Self { worker_tag: u64::from(worker_tag) << 32, held: RefCell::new(BTreeMap::new()), metrics }
    }

    pub fn ticket_id(&self, context_id: u32) -> u64 {
        self.worker_tag | u64::from(context_id)
    }

    fn holder(&self) -> u32 {
        holder_of(self.worker_tag)
    }

    /// The context id of a ticket this worker holds.
    fn own(&self, ticket: u64) -> Option<u32> {
        (holder_of(ticket) == self.holder()).then_some(ticket as u32)
    }

    pub fn holds_any(&self) -> bool {
        self.held.try_borrow().is_ok_and(|h| !h.is_empty())
    }

    pub fn holds(&self, context_id: u32) -> bool {
        self.held.try_borrow().is_ok_and(|h| h.contains_key(&context_id))
    }

    /// Requests held in `pool` by every worker.
    pub fn queued(&self, host: &dyn Host, pool: &str) -> usize {
        FlowQueue::decode(host.shared_value(&key(pool)).as_deref()).len()
    }

    /// Rewrites a pool's queue with `change`, returning what it returned.
    fn update<T>(&self, host: &dyn Host, pool: &str, mut change: impl FnMut(&mut FlowQueue) -> T) -> Option<T> {
        let mut out = None;
        let written = host.update_shared_data(&key(pool), |current| {
            let mut queue = FlowQueue::decode(current);
            out = Some(change(&mut queue));
            Ok::<_, ()>(queue.encode())
        });
        match written {
            Ok(()) => out,
            Err(UpdateError::Contended) | Err(UpdateError::Declined(())) => {
                log::warn!("infergate flow: the queue of pool `{pool}` stayed contended; retrying on the next tick");
                None
            }
            Err(UpdateError::Host(status)) => {
                log::error!("infergate flow: cannot write the queue of pool `{pool}`: {status:?}");
                None
            }
        }
    }

    /// Offers a request to its pool's queue. `Ok`: held (the stream pauses). `Err`:
    /// refused, to be answered now.
    pub fn hold(
        &self,
        host: &dyn Host,
        context_id: u32,
        ticket: Ticket,
        held: Held,
        settings: &FlowControlSettings,
    ) -> Result<(), Refusal> {
        let pool = held.pool.clone();
        let now_ms = ticket.enqueued_ms;
        // Held before it is offered: a ticket must never be without its stream here.
        match self.held.try_borrow_mut() {
            Ok(mut map) => drop(map.insert(context_id, held)),
            Err(_) => return Err(Refusal::QueueFull),
        }
        let offer = self.update(host, &pool, |queue| {
            queue.beat(self.holder(), now_ms);
            queue.offer(ticket.clone(), settings)
        });
        let refused = match offer {
            Some(Offer::Queued) => None,
            Some(Offer::QueuedDisplacing(out)) => {
                // Its owner finds it gone on its next tick and answers it.
                log::debug!("infergate flow: request {:x} displaced in pool `{pool}`", out.id);
                None
            }
            Some(Offer::Refused(why)) => Some(why),
            None => Some(Refusal::QueueFull),
        };
        if let Some(why) = refused {
            if let Ok(mut map) = self.held.try_borrow_mut() {
                map.remove(&context_id);
            }
            self.metrics.dropped(why);
            return Err(why);
        }
        self.metrics.queued.shift(1);
        Ok(())
    }

    /// The client left while its request was held: its place goes at once.
    pub fn cancel(&self, host: &dyn Host, context_id: u32) {
        let Some(held) = self.held.try_borrow_mut().ok().and_then(|mut map| map.remove(&context_id)) else { return };
        let id = self.ticket_id(context_id);
        self.update(host, &held.pool, |queue| queue.remove(id));
        self.metrics.queued.shift(-1);
        self.metrics.cancelled.increment();
    }

    /// The plugin is being torn down: every held request leaves its queue, and the
    /// caller answers them (their streams would otherwise wait for nobody).
    pub fn drain(&self, host: &dyn Host) -> Vec<u32> {
        let held = match self.held.try_borrow_mut() {
            Ok(mut map) => std::mem::take(&mut *map),
            Err(_) => return Vec::new(),
        };
        for (context_id, request) in &held {
            let id = self.ticket_id(*context_id);
            self.update(host, &request.pool, |queue| queue.remove(id));
            self.metrics.queued.shift(-1);
        }
        held.into_keys().collect()
    }

    /// The pools this worker holds requests in.
    pub fn pools(&self) -> Vec<String> {
        let Ok(map) = self.held.try_borrow() else { return Vec::new() };
        let mut pools: Vec<String> = map.values().map(|h| h.pool.clone()).collect();
        pools.sort_unstable();
        pools.dedup();
        pools
    }

    /// One tick's work on `pool`: answers what expired or was displaced, then offers
    /// the queue's heads that are this worker's to `route`, until one stays held or
    /// the head is another worker's. Returns what to do with each stream.
    pub fn tick<T>(
        &self,
        host: &dyn Host,
        pool: &str,
        now_ms: u64,
        settings: &FlowControlSettings,
        retry_after_s: u32,
        mut route: impl FnMut(&Held) -> Attempt<T>,
    ) -> Vec<Outcome<T>> {
        let mut outcomes = Vec::new();
        let view = FlowQueue::decode(host.shared_value(&key(pool)).as_deref());
        // Own requests that expired, or that another worker's arrival displaced.
        let gone: Vec<(u32, Refusal)> = match self.held.try_borrow() {
            Ok(map) => map
                .iter()
                .filter(|(_, h)| h.pool == pool)
                .filter_map(|(ctx, h)| {
                    let present = view.tickets().iter().any(|t| t.id == self.ticket_id(*ctx));
                    if h.expires_ms <= now_ms {
                        Some((*ctx, Refusal::Expired))
                    } else {
                        (!present).then_some((*ctx, Refusal::Displaced))
                    }
                })
                .collect(),
            Err(_) => return outcomes,
        };
        // Own tickets no held stream matches (a removal that failed to write), and
        // the tickets this tick answers.
        let mut remove: Vec<u64> = view
            .tickets()
            .iter()
            .filter(|t| self.own(t.id).is_some_and(|ctx| !self.holds(ctx)))
            .map(|t| t.id)
            .collect();
        remove.extend(gone.iter().map(|(ctx, _)| self.ticket_id(*ctx)));
        let silent = view.tickets().iter().any(|t| {
            view.beat_of(holder_of(t.id)).unwrap_or(t.enqueued_ms).saturating_add(ORPHAN_SILENCE_MS) <= now_ms
        });
        let beat_due = view.beat_of(self.holder()).is_none_or(|at| at.saturating_add(BEAT_MS) <= now_ms);
        if !remove.is_empty() || silent || beat_due {
            self.update(host, pool, |queue| {
                remove.iter().for_each(|id| drop(queue.remove(*id)));
                let orphans = queue.drop_orphans(now_ms, ORPHAN_SILENCE_MS);
                if !orphans.is_empty() {
                    log::warn!("infergate flow: removed {} tickets of silent workers in pool `{pool}`", orphans.len());
                }
                queue.beat(self.holder(), now_ms);
            });
        }
        for (context_id, why) in gone {
            if let Some(held) = self.take_held(context_id) {
                self.metrics.dropped(why);
                let error = why.answer(held.band, pool, retry_after_s);
                outcomes.push(Outcome::Answer { context_id, error, undo: None });
            }
        }
        for _ in 0..MAX_RELEASES_PER_TICK {
            let queue = FlowQueue::decode(host.shared_value(&key(pool)).as_deref());
            let Some(head) = queue.next(settings).map(|t| t.id) else { break };
            let Some(context_id) = self.own(head) else { break };
            let attempt = match self.held.try_borrow() {
                Ok(map) => map.get(&context_id).map(&mut route),
                Err(_) => break,
            };
            let attempt = match attempt {
                Some(Attempt::Hold) => break,
                // A ticket without a held stream: its stream ended in between.
                None => {
                    self.update(host, pool, |queue| queue.remove(head));
                    continue;
                }
                Some(Attempt::Routed(routed)) => Ok(routed),
                Some(Attempt::Fail(error)) => Err(error),
            };
            let taken = match attempt {
                Ok(_) => self.update(host, pool, |queue| queue.take(head).is_some()),
                // Not sent: its tenant is not charged.
                Err(_) => self.update(host, pool, |queue| queue.remove(head).is_some()),
            };
            let held = match (taken, attempt) {
                // The write failed: it stays held, for the next tick.
                (None, Ok(routed)) => {
                    outcomes.push(Outcome::Undo(routed));
                    break;
                }
                (None, Err(_)) => break,
                (Some(taken), attempt) => match self.take_held(context_id) {
                    Some(held) => (taken, attempt, held),
                    None => {
                        if let Ok(routed) = attempt {
                            outcomes.push(Outcome::Undo(routed));
                        }
                        continue;
                    }
                },
            };
            outcomes.push(match held {
                (true, Ok(routed), held) => {
                    self.metrics.released.increment();
                    self.metrics.wait_ms.set(now_ms.saturating_sub(held.enqueued_ms));
                    Outcome::Release { context_id, held, routed }
                }
                (false, Ok(routed), held) => {
                    // Displaced between the read and the take: the routing is undone.
                    self.metrics.dropped(Refusal::Displaced);
                    let error = Refusal::Displaced.answer(held.band, pool, retry_after_s);
                    Outcome::Answer { context_id, error, undo: Some(routed) }
                }
                (_, Err(error), _) => Outcome::Answer { context_id, error, undo: None },
            });
        }
        outcomes
    }

    fn take_held(&self, context_id: u32) -> Option<Held> {
        let held = self.held.try_borrow_mut().ok()?.remove(&context_id)?;
        self.metrics.queued.shift(-1);
        Some(held)
    }
}
