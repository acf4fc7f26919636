//! One pool's held requests and the state their order depends on. Linear scans over a
//! bounded list: the queue holds at most `max_queued` tickets (1,024 by default) and is
//! read once per release, which costs less than keeping per-tenant heaps in step
//! across serialization.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::refusal::Refusal;
use super::ticket::Ticket;
use crate::config::{Criticality, Fairness, FlowControlSettings, QueueOrder};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowQueue {
    /// In arrival order.
    tickets: Vec<Ticket>,
    /// Tokens dispatched per band and tenant since the band last ran empty, the
    /// attained-service order's measure. A tenant that starts queueing begins at the
    /// least any queued tenant of its band has had, so that it neither banks credit
    /// while idle nor is starved by tenants that were there before it.
    attained: Vec<Attained>,
    /// The tenant each band served last, for round robin (index: band rank).
    last_served: [Option<String>; 3],
    /// When each holder (the high 32 bits of its tickets' ids) last showed it is
    /// alive: a holder that stopped cannot release or answer its tickets.
    beats: Vec<Beat>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Beat {
    holder: u32,
    at_ms: u64,
}

/// The holder of a ticket: the high 32 bits of its id.
pub fn holder_of(id: u64) -> u32 {
    (id >> 32) as u32
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Attained {
    band: Criticality,
    tenant: String,
    tokens: f64,
}

/// What became of an offered request.
#[derive(Debug, Clone, PartialEq)]
pub enum Offer {
    Queued,
    /// Queued in the place of this one, which must now be answered.
    QueuedDisplacing(Ticket),
    Refused(Refusal),
}

fn rank(band: Criticality) -> usize {
    match band {
        Criticality::Sheddable => 0,
        Criticality::Standard => 1,
        Criticality::Critical => 2,
    }
}

impl FlowQueue {
    /// The shared-data value (MessagePack).
    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec(self).unwrap_or_default()
    }

    /// A shared-data value; an unreadable one (written by a module of another
    /// version) reads as an empty queue, whose tickets' owners then find them gone.
    pub fn decode(bytes: Option<&[u8]>) -> Self {
        bytes.and_then(|b| rmp_serde::from_slice(b).ok()).unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.tickets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tickets.is_empty()
    }

    pub fn tickets(&self) -> &[Ticket] {
        &self.tickets
    }

    pub fn queued_in(&self, band: Criticality) -> usize {
        self.tickets.iter().filter(|t| t.band == band).count()
    }

    fn queued_by(&self, band: Criticality, tenant: &str) -> usize {
        self.tickets.iter().filter(|t| t.band == band && t.tenant == tenant).count()
    }

    /// Holds a request, unless the queue is full of requests with as much claim to a
    /// place: a lower band's, or a tenant's holding at least two more of the same band.
    pub fn offer(&mut self, mut ticket: Ticket, settings: &FlowControlSettings) -> Offer {
        if !self.may_track(ticket.band, &ticket.tenant, settings.max_tenants as usize) {
            ticket.tenant = String::new();
        }
        let mut displaced = None;
        if self.tickets.len() >= settings.max_queued as usize {
            let Some(victim) = self.displaceable_by(&ticket) else {
                return Offer::Refused(Refusal::QueueFull);
            };
            displaced = Some(self.tickets.remove(victim));
        }
        self.start_tenant(&ticket);
        self.tickets.push(ticket);
        displaced.map_or(Offer::Queued, Offer::QueuedDisplacing)
    }

    /// The ticket that would make room for `arrival`: the newest ticket of the lowest
    /// band's busiest tenant, if it has less claim than `arrival`.
    fn displaceable_by(&self, arrival: &Ticket) -> Option<usize> {
        let lowest = self.tickets.iter().map(|t| t.band).min()?;
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for t in self.tickets.iter().filter(|t| t.band == lowest) {
            *counts.entry(t.tenant.as_str()).or_default() += 1;
        }
        let (busiest, most) = counts.iter().max_by_key(|(_, n)| **n).map(|(t, n)| (*t, *n))?;
        let less_claim = lowest < arrival.band
            || (lowest == arrival.band && most > self.queued_by(arrival.band, &arrival.tenant) + 1);
        if !less_claim {
            return None;
        }
        self.tickets.iter().rposition(|t| t.band == lowest && t.tenant == busiest)
    }

    /// Whether `tenant` may keep its own place in `band`: it has one already, or the
    /// band tracks fewer than `bound` tenants once those with nothing held are
    /// forgotten. The anonymous tenant always may.
    fn may_track(&mut self, band: Criticality, tenant: &str, bound: usize) -> bool {
        let tracked = |queue: &Self| {
            let mut names: Vec<&str> =
                queue.tickets.iter().filter(|t| t.band == band).map(|t| t.tenant.as_str()).collect();
            names.extend(queue.attained.iter().filter(|a| a.band == band).map(|a| a.tenant.as_str()));
            names.sort_unstable();
            names.dedup();
            (names.contains(&tenant), names.len())
        };
        let (known, count) = tracked(self);
        if tenant.is_empty() || known || count < bound {
            return true;
        }
        // Forget the tenants of this band with nothing held, then look again.
        let tickets = &self.tickets;
        self.attained.retain(|a| a.band != band || tickets.iter().any(|t| t.band == band && t.tenant == a.tenant));
        tracked(self).1 < bound
    }

    fn start_tenant(&mut self, ticket: &Ticket) {
        let band = ticket.band;
        if self.queued_in(band) == 0 {
            self.attained.retain(|a| a.band != band);
        }
        if self.queued_by(band, &ticket.tenant) > 0 {
            return;
        }
        let floor = self
            .attained
            .iter()
            .filter(|a| a.band == band && self.queued_by(band, &a.tenant) > 0)
            .map(|a| a.tokens)
            .fold(None, |least: Option<f64>, t| Some(least.map_or(t, |l| l.min(t))))
            .unwrap_or(0.0);
        match self.attained.iter_mut().find(|a| a.band == band && a.tenant == ticket.tenant) {
            Some(a) => a.tokens = a.tokens.max(floor),
            None => self.attained.push(Attained { band, tenant: ticket.tenant.clone(), tokens: floor }),
        }
    }

    fn attained_by(&self, band: Criticality, tenant: &str) -> f64 {
        self.attained.iter().find(|a| a.band == band && a.tenant == tenant).map_or(0.0, |a| a.tokens)
    }

    /// The request to release next: the highest band's, the tenant the fairness policy
    /// picks, that tenant's first by the configured order.
    pub fn next(&self, settings: &FlowControlSettings) -> Option<&Ticket> {
        let band = self.tickets.iter().map(|t| t.band).max()?;
        let tenant = self.next_tenant(band, settings.fairness)?;
        let mine = self.tickets.iter().filter(|t| t.band == band && t.tenant == tenant);
        match settings.order {
            // Stable: among equal deadlines the earliest arrival wins.
            QueueOrder::EarliestDeadline => mine.min_by_key(|t| t.deadline_ms),
            QueueOrder::FirstCome => mine.min_by_key(|t| t.enqueued_ms),
        }
    }

    fn next_tenant(&self, band: Criticality, fairness: Fairness) -> Option<String> {
        let mut tenants: Vec<&str> =
            self.tickets.iter().filter(|t| t.band == band).map(|t| t.tenant.as_str()).collect();
        tenants.sort_unstable();
        tenants.dedup();
        let chosen = match fairness {
            Fairness::AttainedService => tenants
                .iter()
                .min_by(|a, b| self.attained_by(band, a).total_cmp(&self.attained_by(band, b)).then(a.cmp(b)))
                .copied(),
            Fairness::RoundRobin => {
                let last = self.last_served.get(rank(band)).and_then(|l| l.as_deref());
                let after = last.and_then(|l| tenants.iter().find(|t| **t > l));
                after.or(tenants.first()).copied()
            }
        };
        chosen.map(str::to_string)
    }

    /// Records that `holder` is alive at `now_ms`.
    pub fn beat(&mut self, holder: u32, now_ms: u64) {
        match self.beats.iter_mut().find(|b| b.holder == holder) {
            Some(beat) => beat.at_ms = beat.at_ms.max(now_ms),
            None => self.beats.push(Beat { holder, at_ms: now_ms }),
        }
    }

    /// When `holder` last showed it is alive.
    pub fn beat_of(&self, holder: u32) -> Option<u64> {
        self.beats.iter().find(|b| b.holder == holder).map(|b| b.at_ms)
    }

    /// Removes the tickets of holders silent for `silence_ms` (or never heard from,
    /// for tickets that old), and forgets silent holders with nothing queued.
    pub fn drop_orphans(&mut self, now_ms: u64, silence_ms: u64) -> Vec<Ticket> {
        let cutoff = now_ms.saturating_sub(silence_ms);
        let beats = std::mem::take(&mut self.beats);
        let alive = |holder: u32| beats.iter().find(|b| b.holder == holder).map(|b| b.at_ms > cutoff);
        let (orphans, kept): (Vec<Ticket>, Vec<Ticket>) = std::mem::take(&mut self.tickets)
            .into_iter()
            .partition(|t| !alive(holder_of(t.id)).unwrap_or(t.enqueued_ms > cutoff));
        self.tickets = kept;
        self.beats = beats.into_iter().filter(|b| b.at_ms > cutoff).collect();
        self.prune_attained();
        orphans
    }

    /// Forgets the attained service of tenants with nothing queued whose count is at
    /// or below their band's floor: rejoining, they would start at the floor anyway.
    fn prune_attained(&mut self) {
        let tickets = &self.tickets;
        let queued = |band: Criticality, tenant: &str| tickets.iter().any(|t| t.band == band && t.tenant == tenant);
        let floors: Vec<(Criticality, f64)> = [Criticality::Critical, Criticality::Standard, Criticality::Sheddable]
            .into_iter()
            .filter_map(|band| {
                self.attained
                    .iter()
                    .filter(|a| a.band == band && queued(band, &a.tenant))
                    .map(|a| a.tokens)
                    .reduce(f64::min)
                    .map(|floor| (band, floor))
            })
            .collect();
        self.attained.retain(|a| {
            queued(a.band, &a.tenant)
                || floors.iter().find(|(band, _)| *band == a.band).is_some_and(|(_, floor)| a.tokens > *floor)
        });
    }

    /// Removes a released request and charges its tenant.
    pub fn take(&mut self, id: u64) -> Option<Ticket> {
        let at = self.tickets.iter().position(|t| t.id == id)?;
        let ticket = self.tickets.remove(at);
        match self.attained.iter_mut().find(|a| a.band == ticket.band && a.tenant == ticket.tenant) {
            Some(a) => a.tokens += ticket.cost_tokens,
            None => self.attained.push(Attained {
                band: ticket.band,
                tenant: ticket.tenant.clone(),
                tokens: ticket.cost_tokens,
            }),
        }
        if let Some(last) = self.last_served.get_mut(rank(ticket.band)) {
            *last = Some(ticket.tenant.clone());
        }
        self.prune_attained();
        Some(ticket)
    }

    /// Removes a request that will not be released (its client left), charging nobody.
    pub fn remove(&mut self, id: u64) -> Option<Ticket> {
        let at = self.tickets.iter().position(|t| t.id == id)?;
        let ticket = self.tickets.remove(at);
        self.prune_attained();
        Some(ticket)
    }

    /// Removes and returns the requests held until their expiry, in arrival order.
    pub fn expire(&mut self, now_ms: u64) -> Vec<Ticket> {
        let (expired, kept) = std::mem::take(&mut self.tickets).into_iter().partition(|t| t.expires_ms <= now_ms);
        self.tickets = kept;
        expired
    }

    /// When the next held request expires.
    pub fn next_expiry_ms(&self) -> Option<u64> {
        self.tickets.iter().map(|t| t.expires_ms).min()
    }
}
