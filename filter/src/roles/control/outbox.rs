//! The replica's answer to a snapshot push: the prefix records its router workers made
//! since the last push (drained from the outbox queue) and its current load per pod,
//! for the agent to pass on to the other replicas (`infergate_core::replicas`).

use infergate_core::prefix::{MAX_RECORD_HASHES, PrefixRecord};
use infergate_core::replicas::ReplicaDigest;
use infergate_core::snapshot::Snapshot;
use infergate_core::wire::queue::OUTBOX;
use infergate_core::wire::shared_data::OUTBOX_DRAINED_AT;

use crate::host::Host;
use crate::roles::router::peers::ensure_listed;

/// Registers the outbox (idempotent: every worker's control context may) and lists it
/// for the router workers. `None` if the host refused.
pub fn open(host: &dyn Host) -> Option<u32> {
    match host.register_queue(OUTBOX) {
        Ok(queue) => {
            ensure_listed(host, OUTBOX);
            Some(queue)
        }
        Err(status) => {
            log::warn!(
                "infergate control: cannot register {OUTBOX}; other replicas will not see this one's prefix records: {status:?}"
            );
            None
        }
    }
}

/// What this replica tells the others: the records in the outbox, oldest first and at
/// most [`MAX_RECORD_HASHES`] hashes (messages not dequeued yet wait for the next
/// push; records of a dequeued message over the bound are dropped and logged), and
/// the load of every pod of `snapshot` that has any.
pub fn digest(host: &dyn Host, outbox: Option<u32>, snapshot: &Snapshot) -> ReplicaDigest {
    let records = outbox.map(|queue| drain(host, queue)).unwrap_or_default();
    // Routers fill the outbox only while it is drained (see the router's peers).
    if let Err(status) = host.set_shared_data(OUTBOX_DRAINED_AT, &host.now_unix_ms().to_le_bytes(), None) {
        log::warn!("infergate control: cannot mark the outbox drained: {status:?}");
    }
    let pods = snapshot.pools.iter().flat_map(|pool| &pool.pods).map(|pod| pod.address);
    let load = super::load::own_load(host, pods);
    ReplicaDigest { records, load, replicas: 0, index: None }
}

fn drain(host: &dyn Host, queue: u32) -> Vec<PrefixRecord> {
    let mut records = Vec::new();
    let mut hashes = 0;
    let mut dropped = 0;
    while hashes < MAX_RECORD_HASHES {
        let Some(message) = host.dequeue(queue) else { break };
        for record in PrefixRecord::decode_all(&message).unwrap_or_default() {
            if hashes + record.hashes.len() > MAX_RECORD_HASHES {
                dropped += 1;
                continue;
            }
            hashes += record.hashes.len();
            // Adapter loads stay within this Envoy: their times are this host's clock,
            // which another replica would compare with its own. A record that carried
            // only a load has nothing left to pass on.
            if !record.hashes.is_empty() {
                records.push(PrefixRecord { adapter_load: None, ..record });
            }
        }
    }
    if dropped > 0 {
        log::warn!("infergate control: {dropped} prefix records over the digest's bound were not passed on");
    }
    records
}
