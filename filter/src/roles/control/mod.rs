//! The control listener's filter: admits a snapshot push only with the bearer token
//! and only if it decodes and validates, so a bad push can never replace the active
//! snapshot. Accepted pushes go to the singleton through the shared queue. On the
//! global router, the same filter takes clusters' summaries (`POST /v1/summary`).
//!
//! When the agent pushes to several gateway replicas, an accepted snapshot is answered
//! with this replica's digest (`outbox`), which the agent passes on to the others; with
//! one replica the answer stays an empty 204. Between snapshots the agent pushes the
//! other replicas' load (`POST /v1/load`, `load`), answered with this replica's.

mod load;
mod outbox;

use std::cell::Cell;
use std::rc::Rc;

use infergate_core::control::bearer_token_matches;
use infergate_core::filter_config::ControlRole;
use infergate_core::snapshot::{MAX_SNAPSHOT_BYTES, Snapshot};
use infergate_core::wire::header::REPLICAS as REPLICAS_HEADER;
use infergate_core::wire::path::{LOAD as LOAD_PATH, SNAPSHOT as SNAPSHOT_PATH, SUMMARY as SUMMARY_PATH};
use infergate_core::wire::queue::SNAPSHOTS;
use infergate_core::wire::shared_data::SEQUENCE;

use crate::host::events::{Flow, RootEvents, StreamEvents};
use crate::host::{Host, UpdateError};
use crate::metrics::Metric;
use crate::roles::router::peers::relay_to_workers;
use crate::shared::summaries::{self, StoreError};

/// The control listener's metrics.
struct ControlMetrics {
    accepted: Metric,
    /// Load pushes admitted (the load exchange between snapshots).
    load_pushes: Metric,
    unauthorized: Metric,
    invalid: Metric,
}

impl ControlMetrics {
    fn define(host: &Rc<dyn Host>) -> Self {
        Self {
            accepted: Metric::counter(host, "infergate.control.accepted"),
            load_pushes: Metric::counter(host, "infergate.control.load_pushes"),
            unauthorized: Metric::counter(host, "infergate.control.unauthorized"),
            invalid: Metric::counter(host, "infergate.control.invalid"),
        }
    }
}

pub struct ControlShared {
    host: Rc<dyn Host>,
    token: String,
    vm_id: String,
    /// Resolved lazily: the singleton may register after this filter starts.
    queue: Cell<Option<u32>>,
    /// Registered at the first push that says several replicas are served, so that a
    /// lone gateway never collects records.
    outbox: Cell<Option<u32>>,
    metrics: ControlMetrics,
}

impl ControlShared {
    pub fn new(host: Rc<dyn Host>, role: ControlRole) -> Result<Self, String> {
        let token = host.env_var(&role.token_env).unwrap_or_default();
        if token.trim().is_empty() {
            return Err(format!(
                "the environment variable {} is empty or not exposed to the VM (vm_config.environment_variables.host_env_keys)",
                role.token_env
            ));
        }
        Ok(Self {
            token: token.trim().to_string(),
            vm_id: role.vm_id,
            queue: Cell::new(None),
            outbox: Cell::new(None),
            metrics: ControlMetrics::define(&host),
            host,
        })
    }

    fn queue(&self) -> Option<u32> {
        if self.queue.get().is_none() {
            self.queue.set(self.host.resolve_queue(&self.vm_id, SNAPSHOTS));
        }
        self.queue.get()
    }

    fn outbox(&self) -> Option<u32> {
        if self.outbox.get().is_none() {
            self.outbox.set(outbox::open(&*self.host));
        }
        self.outbox.get()
    }
}

/// What a push carries, by its path.
#[derive(Clone, Copy)]
enum Push {
    Snapshot,
    Load,
    Summary,
}

impl RootEvents for Rc<ControlShared> {
    fn new_stream(&self, _context_id: u32) -> Box<dyn StreamEvents> {
        Box::new(ControlHttp { shared: Rc::clone(self), push: Push::Snapshot, replicated: false })
    }
}

struct ControlHttp {
    shared: Rc<ControlShared>,
    push: Push,
    /// The agent pushes to more than one replica (the push's `x-infergate-replicas`).
    replicated: bool,
}

impl ControlHttp {
    fn host(&self) -> &dyn Host {
        &*self.shared.host
    }

    fn admit_summary(&self, body: &[u8]) -> Flow {
        match summaries::store(self.host(), body) {
            Ok((cluster, sequence)) => {
                self.shared.metrics.accepted.increment();
                log::debug!("infergate control: accepted summary {sequence} of cluster {cluster}");
                self.host().reply(204, &[], b"");
                Flow::Pause
            }
            Err(StoreError::Invalid(err)) => {
                self.shared.metrics.invalid.increment();
                log::warn!("infergate control: refused summary: {err}");
                self.answer(400, &err.to_string())
            }
            Err(StoreError::Replay { cluster, sequence, newest }) => {
                self.shared.metrics.invalid.increment();
                log::warn!("infergate control: refused summary {sequence} of {cluster}: not newer than {newest}");
                self.answer(409, &format!("sequence {sequence} of cluster {cluster} is not newer than {newest}"))
            }
            Err(StoreError::Host(message)) => self.answer(503, &message),
        }
    }

    fn admit_push(&self, body: &[u8]) -> Flow {
        match self.push {
            Push::Snapshot => self.admit(body),
            Push::Load => self.admit_load(body),
            Push::Summary => self.admit_summary(body),
        }
    }

    fn admit_load(&self, body: &[u8]) -> Flow {
        match load::admit(self.host(), body) {
            Ok(own) => {
                self.shared.metrics.load_pushes.increment();
                self.host().reply(200, &[("content-type", "application/msgpack")], &own.encode());
                Flow::Pause
            }
            Err(err) => {
                self.shared.metrics.invalid.increment();
                log::warn!("infergate control: refused a load push: {err}");
                self.answer(400, &err)
            }
        }
    }

    fn answer(&self, status: u32, message: &str) -> Flow {
        let body = format!("{{\"error\":{}}}", serde_json::Value::from(message));
        self.host().reply(status, &[("content-type", "application/json")], body.as_bytes());
        Flow::Pause
    }

    fn admit(&self, body: &[u8]) -> Flow {
        let mut snapshot = match Snapshot::decode(body) {
            Ok(snapshot) => snapshot,
            Err(err) => {
                self.shared.metrics.invalid.increment();
                log::warn!("infergate control: refused snapshot: {err}");
                return self.answer(400, &err.to_string());
            }
        };
        if let Err(highest) = claim_sequence(self.host(), snapshot.sequence) {
            self.shared.metrics.invalid.increment();
            log::warn!(
                "infergate control: refused snapshot {}: not newer than {highest} (a replay, or a second agent)",
                snapshot.sequence
            );
            return self.answer(
                409,
                &format!("sequence {} is not newer than {highest}, the newest admitted", snapshot.sequence),
            );
        }
        let Some(queue) = self.shared.queue() else {
            return self.answer(503, "the snapshot queue is not registered yet; is the singleton configured?");
        };
        if let Err(status) = self.host().enqueue(queue, body) {
            // The queue id can go stale if the singleton restarted; resolve again next time.
            self.shared.queue.set(None);
            return self.answer(503, &format!("cannot queue the snapshot: {status:?}"));
        }
        self.shared.metrics.accepted.increment();
        log::debug!("infergate control: accepted snapshot {}", snapshot.sequence);
        if !self.replicated {
            self.host().reply(204, &[], b"");
            return Flow::Pause;
        }
        load::remember_pods(self.host(), &snapshot);
        // A worker reads only the newest snapshot when it next routes, skipping any
        // published in between: the records go to every worker's queue instead.
        if !snapshot.peers.records.is_empty() {
            // Another host's adapter loads would be timed by its clock: never counted here.
            snapshot.peers.records.iter_mut().for_each(|r| r.adapter_load = None);
            let workers = relay_to_workers(self.host(), &self.shared.vm_id, &snapshot.peers.records);
            log::debug!("infergate control: {} peer records to {workers} workers", snapshot.peers.records.len());
        }
        let digest = outbox::digest(self.host(), self.shared.outbox(), &snapshot);
        self.host().reply(200, &[("content-type", "application/msgpack")], &digest.encode());
        Flow::Pause
    }
}

/// Records `sequence` as the newest admitted, or returns the newer one already there.
/// Compare-and-swap, because every worker's control context admits pushes.
fn claim_sequence(host: &dyn Host, sequence: u64) -> Result<(), u64> {
    let claim = |current: Option<&[u8]>| match current {
        Some(bytes) => {
            let highest = <[u8; 8]>::try_from(bytes).map_or(0, u64::from_le_bytes);
            if sequence <= highest { Err(highest) } else { Ok(sequence.to_le_bytes()) }
        }
        None => Ok(sequence.to_le_bytes()),
    };
    match host.update_shared_data(SEQUENCE, claim) {
        Err(UpdateError::Declined(highest)) => Err(highest),
        // Contended that long, admit it: the singleton keeps the newest in queue order.
        Ok(()) | Err(UpdateError::Contended | UpdateError::Host(_)) => Ok(()),
    }
}

impl StreamEvents for ControlHttp {
    fn on_request_headers(&mut self, end_of_stream: bool) -> Flow {
        let path = self.host().request_header_text(":path").unwrap_or_default();
        self.push = match path.as_str() {
            SNAPSHOT_PATH => Push::Snapshot,
            LOAD_PATH => Push::Load,
            SUMMARY_PATH => Push::Summary,
            _ => {
                return self
                    .answer(404, "the control listener serves only POST /v1/snapshot, /v1/load and /v1/summary");
            }
        };
        if self.host().request_header_text(":method").as_deref() != Some("POST") {
            return self.answer(405, "POST a MessagePack snapshot, load or summary");
        }
        if !bearer_token_matches(self.host().request_header_text("authorization").as_deref(), &self.shared.token) {
            self.shared.metrics.unauthorized.increment();
            return self.answer(401, "missing or wrong bearer token");
        }
        self.replicated =
            self.host().request_header_text(REPLICAS_HEADER).and_then(|v| v.trim().parse::<u32>().ok()).unwrap_or(1)
                > 1;
        let declared = self.host().request_header_text("content-length").and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|len| len > MAX_SNAPSHOT_BYTES) {
            return self.answer(413, "snapshot too large");
        }
        if end_of_stream {
            return self.admit_push(&[]);
        }
        Flow::Pause
    }

    fn on_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Flow {
        if body_size > MAX_SNAPSHOT_BYTES {
            return self.answer(413, "snapshot too large");
        }
        if !end_of_stream {
            return Flow::Pause;
        }
        let body = self.host().request_body(0, body_size).unwrap_or_default();
        self.admit_push(&body)
    }
}

#[cfg(test)]
mod tests;
