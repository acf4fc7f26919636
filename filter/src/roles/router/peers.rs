//! Shares prefix ownership between Envoy workers. Each worker's router registers its own
//! shared queue and lists it in shared data; when a pod starts answering a request, the
//! worker that routed it records the prompt's blocks locally and sends the record to
//! every other worker's queue. Each worker thus keeps a full local index, read without
//! any shared-data copy on the request path.
//!
//! Every enqueue wakes the receiving worker's event loop, which cost more CPU than the
//! routing decision itself when done per request (see BENCHMARKS.md). Records are
//! therefore sent in batches: the first record after a quiet period goes at once, so
//! a conversation's next turn finds its prefix on any worker; under load the rest wait
//! at most `FLUSH_PERIOD_MS` for this worker's tick.
//!
//! A worker joins at its first request, so each batch is also kept in shared data
//! ([`recent_prefixes`]) for the workers that join later.
//!
//! The registry also lists the replica's outbox ([`OUTBOX`]), which the control
//! listener drains for the other replicas at each snapshot push. Records go there only
//! while pushes drain it: with the agent gone, they would pile up in Envoy's memory.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use infergate_core::prefix::PrefixRecord;
use infergate_core::wire::queue::{OUTBOX, PREFIX_PREFIX};
use infergate_core::wire::shared_data::{OUTBOX_DRAINED_AT, PREFIX_PEERS};

use super::metrics::PeerMetrics;
use crate::host::Host;
use crate::shared::recent_prefixes;

/// Queue names kept in the registry; older ones (reloaded VMs) drop off.
const MAX_PEERS: usize = 64;
/// Longest a record waits before the other workers see it: the router's tick period.
pub const FLUSH_PERIOD_MS: u64 = 5;
/// Hashes that make a batch go at once.
const FLUSH_HASHES: usize = 8_192;
/// The outbox is filled only if a push drained it this recently: ten default
/// intervals, so a slow push or two do not lose records.
const OUTBOX_MAX_IDLE_MS: u64 = 1_000;

pub struct PrefixPeers {
    host: Rc<dyn Host>,
    vm_id: String,
    own_name: String,
    /// Registered on the first request; `None` before, or if registering failed.
    own_queue: Cell<Option<u32>>,
    joined: Cell<bool>,
    /// Other workers' queues, resolved lazily.
    peers: RefCell<Vec<(String, Option<u32>)>>,
    /// The registry version the peer list was read at.
    seen_cas: Cell<Option<u32>>,
    /// Records not sent yet, oldest first.
    pending: RefCell<Vec<PrefixRecord>>,
    last_flush_ms: Cell<u64>,
    metrics: PeerMetrics,
}

impl PrefixPeers {
    pub fn new(host: &Rc<dyn Host>, vm_id: &str, random: u64) -> Self {
        Self {
            host: Rc::clone(host),
            vm_id: vm_id.to_string(),
            own_name: format!("{PREFIX_PREFIX}{random:016x}"),
            own_queue: Cell::new(None),
            joined: Cell::new(false),
            peers: RefCell::new(Vec::new()),
            seen_cas: Cell::new(None),
            pending: RefCell::new(Vec::new()),
            last_flush_ms: Cell::new(0),
            metrics: PeerMetrics::define(host),
        }
    }

    /// Registers this worker's queue and lists it for the others, once: called for
    /// every request, so that only workers that serve requests receive records
    /// (Envoy's main thread runs the plugin too, and never routes). True the first
    /// time: the caller then applies the records sent before
    /// ([`recent_prefixes::read`]).
    pub fn join(&self) -> bool {
        if self.joined.replace(true) {
            return false;
        }
        match self.host.register_queue(&self.own_name) {
            Ok(id) => {
                self.own_queue.set(Some(id));
                add_to_registry(&*self.host, &self.own_name);
            }
            Err(status) => log::warn!(
                "infergate router: cannot register {}, prefix records from other workers are lost: {status:?}",
                self.own_name
            ),
        }
        true
    }

    /// Takes this worker's queue off the list when its plugin is torn down (a changed
    /// config, a new module). Nothing would drain the queue any more, so every record
    /// the other workers sent there would stay in Envoy's memory; what is in it now is
    /// dropped.
    pub fn leave(&self) {
        let Some(queue) = self.own_queue.take() else { return };
        remove_from_registry(&*self.host, &self.own_name);
        while self.host.dequeue(queue).is_some() {}
    }

    pub fn own_queue(&self) -> Option<u32> {
        self.own_queue.get()
    }

    /// Sends `record` to every other worker, now or with the next batch; true if it
    /// waits for the next tick.
    #[must_use]
    pub fn share(&self, record: PrefixRecord, now_ms: u64) -> bool {
        let Ok(mut pending) = self.pending.try_borrow_mut() else { return false };
        pending.push(record);
        // A handful of records wait at most: summing them is cheaper than tracking.
        let pending_hashes: usize = pending.iter().map(|r| r.hashes.len()).sum();
        drop(pending);
        let quiet = now_ms.saturating_sub(self.last_flush_ms.get()) >= FLUSH_PERIOD_MS;
        if quiet || pending_hashes >= FLUSH_HASHES {
            self.flush(now_ms);
            false
        } else {
            true
        }
    }

    /// The worker's tick: sends what waits.
    pub fn on_tick(&self, now_ms: u64) {
        self.flush(now_ms);
    }

    fn flush(&self, now_ms: u64) {
        let Ok(mut pending) = self.pending.try_borrow_mut() else { return };
        if pending.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut *pending);
        drop(pending);
        self.last_flush_ms.set(now_ms);
        self.broadcast(&PrefixRecord::encode_all(&batch), now_ms);
        keep_for_late_joiners(&*self.host, &batch);
    }

    /// Enqueues `message` on every other worker's queue, and on the outbox if a push
    /// drained it lately.
    fn broadcast(&self, message: &[u8], now_ms: u64) {
        self.refresh();
        let Ok(mut peers) = self.peers.try_borrow_mut() else { return };
        self.metrics.batches.increment();
        let outbox_drained = outbox_drained_since(&*self.host, now_ms.saturating_sub(OUTBOX_MAX_IDLE_MS));
        for (name, queue) in peers.iter_mut() {
            if name == OUTBOX && !outbox_drained {
                continue;
            }
            if queue.is_none() {
                *queue = self.host.resolve_queue(&self.vm_id, name);
            }
            if let Some(id) = *queue {
                match self.host.enqueue(id, message) {
                    Ok(()) => self.metrics.enqueued.increment(),
                    Err(_) => *queue = None,
                }
            }
        }
    }

    fn refresh(&self) {
        let (value, cas) = self.host.shared_data(PREFIX_PEERS);
        if cas == self.seen_cas.get() {
            return;
        }
        self.seen_cas.set(cas);
        let names = registry_names(value.as_deref());
        let Ok(mut peers) = self.peers.try_borrow_mut() else { return };
        peers.retain(|(name, _)| names.contains(name));
        for name in names {
            if name != self.own_name && !peers.iter().any(|(n, _)| *n == name) {
                peers.push((name, None));
            }
        }
    }
}

fn registry_names(value: Option<&[u8]>) -> Vec<String> {
    value
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .map(|text| text.lines().filter(|l| l.starts_with(PREFIX_PREFIX)).map(String::from).collect())
        .unwrap_or_default()
}

/// Queues `message` (encoded prefix records) on every router worker's queue, not on
/// the outbox: how the control listener hands the other replicas' records to this
/// replica's workers, which apply them whatever snapshots they skip. Returns how many
/// workers got it.
fn send_to_workers(host: &dyn Host, vm_id: &str, message: &[u8]) -> usize {
    let names = registry_names(host.shared_value(PREFIX_PEERS).as_deref());
    let queues = names.iter().filter(|name| *name != OUTBOX).filter_map(|name| host.resolve_queue(vm_id, name));
    queues.filter(|&queue| host.enqueue(queue, message).is_ok()).count()
}

/// Hands the other replicas' `records` to this replica's router workers: now to every
/// listed worker's queue, and through the recent records to each worker that joins
/// later. Returns how many workers got them now.
pub(crate) fn relay_to_workers(host: &dyn Host, vm_id: &str, records: &[PrefixRecord]) -> usize {
    let workers = send_to_workers(host, vm_id, &PrefixRecord::encode_all(records));
    keep_for_late_joiners(host, records);
    workers
}

/// Keeps a batch sent to the workers now for the workers that join later.
fn keep_for_late_joiners(host: &dyn Host, batch: &[PrefixRecord]) {
    if recent_prefixes::keep(host, batch).is_err() {
        log::warn!("infergate: cannot keep the newest prefix records for workers that join later");
    }
}

/// Whether the control listener drained the outbox at or after `since_ms`.
fn outbox_drained_since(host: &dyn Host, since_ms: u64) -> bool {
    let drained_at = host.shared_value(OUTBOX_DRAINED_AT).and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok());
    drained_at.is_some_and(|at| u64::from_le_bytes(at) >= since_ms)
}

/// Lists `name` among the prefix queues unless it is there: one read when it is.
pub(crate) fn ensure_listed(host: &dyn Host, name: &str) {
    if !registry_names(host.shared_value(PREFIX_PEERS).as_deref()).iter().any(|n| n == name) {
        add_to_registry(host, name);
    }
}

/// Lists `name` among the prefix queues, once.
fn add_to_registry(host: &dyn Host, name: &str) {
    let added = update_registry(host, |names| {
        if names.iter().any(|n| n == name) {
            return;
        }
        names.push(name.to_string());
        let skip = names.len().saturating_sub(MAX_PEERS);
        names.drain(..skip);
    });
    if !added {
        log::warn!("infergate router: could not list {name} among the prefix peers");
    }
}

fn remove_from_registry(host: &dyn Host, name: &str) {
    if !update_registry(host, |names| names.retain(|n| n != name)) {
        log::warn!("infergate router: could not take {name} off the prefix peers; they keep sending to it");
    }
}

/// Applies `change` to the list of queue names. Returns whether it was stored.
fn update_registry(host: &dyn Host, change: impl Fn(&mut Vec<String>)) -> bool {
    host.update_shared_data(PREFIX_PEERS, |current| {
        let mut names = registry_names(current);
        change(&mut names);
        Ok::<_, ()>(names.join("\n"))
    })
    .is_ok()
}
