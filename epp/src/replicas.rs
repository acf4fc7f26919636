//! Active-active pickers: what this picker tells the others, through the agent.
//!
//! Several `infergate-epp` replicas behind one gateway each route with their own
//! prefix index and in-flight counts. They exchange both exactly as gateway replicas
//! do (`docs/replicas.md`, `infergate_core::replicas`): the agent pushes every picker
//! with `x-infergate-replicas: N`; a picker answers a snapshot push with a
//! [`ReplicaDigest`] of the prefix records its decisions made since the last push and
//! its load per pod, and a load push (`POST /v1/load`) with its load alone. The agent
//! hands each picker the others' records inside its next snapshot and their summed
//! load between snapshots. So a conversation's next turn finds its pod whichever
//! picker the gateway asks, and two pickers do not send one idle pod two cold prompts.

use infergate_core::endpoint::Endpoint;
use infergate_core::prefix::{MAX_RECORD_HASHES, PrefixRecord};
use infergate_core::replicas::PeerLoad;
use infergate_core::router::LoadLedger;

/// Records are kept only while pushes drain them this recently (ten default push
/// intervals): with the agent gone, or pushing without replicas, they would pile up.
pub const OUTBOX_MAX_IDLE_MS: u64 = 1_000;

/// This picker's prefix records for the other pickers, oldest first, bounded by the
/// hashes one digest may carry.
#[derive(Debug, Default)]
pub struct Outbox {
    records: Vec<PrefixRecord>,
    hashes: usize,
    /// When a replicated push last drained it; `None`: never, so nothing is kept.
    drained_at_ms: Option<u64>,
    /// Records refused since the last drain because the outbox was full.
    dropped: u64,
}

impl Outbox {
    /// Keeps `record` for the next digest, if pushes drain the outbox and it has room.
    pub fn push(&mut self, record: PrefixRecord, now_ms: u64) {
        let drained = self.drained_at_ms.is_some_and(|at| now_ms.saturating_sub(at) <= OUTBOX_MAX_IDLE_MS);
        if !drained || record.hashes.is_empty() {
            return;
        }
        if self.hashes + record.hashes.len() > MAX_RECORD_HASHES {
            self.dropped += 1;
            return;
        }
        self.hashes += record.hashes.len();
        // An adapter load's time is this host's clock, which another picker would
        // compare with its own: never passed on.
        self.records.push(PrefixRecord { adapter_load: None, ..record });
    }

    /// Everything kept since the last drain, and how many records the bound refused.
    pub fn drain(&mut self, now_ms: u64) -> (Vec<PrefixRecord>, u64) {
        self.drained_at_ms = Some(now_ms);
        self.hashes = 0;
        (std::mem::take(&mut self.records), std::mem::take(&mut self.dropped))
    }
}

/// This picker's load on `pods`, those that have any: what the others count beside
/// their own.
pub fn own_load(ledger: &dyn LoadLedger, pods: &[Endpoint]) -> Vec<PeerLoad> {
    PeerLoad::busy(pods.iter().copied(), |pod| ledger.load(pod))
}

#[cfg(test)]
mod tests {
    use infergate_core::router::LocalLedger;

    use super::*;

    fn pod(port: u16) -> Endpoint {
        format!("10.0.0.1:{port}").parse().unwrap()
    }

    #[test]
    fn records_are_kept_only_while_pushes_drain_them() {
        let mut outbox = Outbox::default();
        outbox.push(PrefixRecord::blocks(pod(1), vec![1, 2]), 0);
        assert_eq!(outbox.drain(10), (Vec::new(), 0), "no push had drained it: a lone picker keeps nothing");
        outbox.push(PrefixRecord::blocks(pod(1), vec![1, 2]), 20);
        outbox.push(PrefixRecord::blocks(pod(2), Vec::new()), 30);
        let (records, dropped) = outbox.drain(40);
        assert_eq!((records, dropped), (vec![PrefixRecord::blocks(pod(1), vec![1, 2])], 0));
        // The agent stopped pushing: records stop piling up.
        outbox.push(PrefixRecord::blocks(pod(3), vec![3]), 40 + OUTBOX_MAX_IDLE_MS + 1);
        assert!(outbox.drain(5_000).0.is_empty());
    }

    #[test]
    fn the_outbox_holds_at_most_one_digest_of_hashes() {
        let mut outbox = Outbox::default();
        outbox.drain(0);
        outbox.push(PrefixRecord::blocks(pod(1), vec![7; MAX_RECORD_HASHES]), 1);
        outbox.push(PrefixRecord::blocks(pod(2), vec![8]), 2);
        let (records, dropped) = outbox.drain(3);
        assert_eq!((records.len(), dropped), (1, 1));
    }

    #[test]
    fn own_load_lists_busy_pods_only() {
        let mut ledger = LocalLedger::default();
        ledger.update(pod(1), 2, 300);
        ledger.update(pod(2), 1, 0);
        ledger.update(pod(2), -1, 0);
        let load = own_load(&ledger, &[pod(1), pod(2), pod(3)]);
        assert_eq!(load, vec![PeerLoad { pod: pod(1), in_flight: 2, pending_prefill_tokens: 300 }]);
    }
}
