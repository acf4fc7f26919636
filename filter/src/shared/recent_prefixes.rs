//! The replica's newest prefix records, kept in shared data for router workers that
//! join the prefix peers late.
//!
//! A worker lists its prefix queue at its first request (Envoy's main thread runs the
//! plugin too and never routes, so joining at start doubled every batch). Every record
//! sent before then, by this replica's other workers or relayed by the control listener
//! from the other replicas, reached no queue of its. A new connection lands on any
//! worker, so a conversation whose first turn one worker routed missed its pod when its
//! next turn was an idle worker's first request (found by the real-vLLM end-to-end
//! test, which failed that way in CI). Each batch sent to the peers is therefore also
//! kept here, and a worker applies what is here when it joins.
//!
//! A ring of [`SLOTS`] values, `infergate.recent-prefixes.<slot>`, each an 8-byte
//! little-endian sequence number and then the batch's records, and the head
//! `infergate.recent-prefixes`, the number of batches written (a generation). Writing is
//! a compare-and-swap of the 8-byte head and one plain write of a slot, with no read or
//! decoding of the others, and wakes no worker (its cost per request was not measured).
//! A reader takes a slot only if it holds the sequence expected there, so a slot
//! overwritten, or not yet written, meanwhile is skipped rather than misread.

use infergate_core::prefix::PrefixRecord;
use infergate_core::wire::shared_data::RECENT_PREFIXES;

use super::generation;
use crate::host::{Host, UpdateError};

/// Batches kept: the newest 128 batches, which at low load, where one worker may
/// stay idle, are the newest 128 requests.
const SLOTS: u64 = 128;
/// Hashes kept of one batch, its newest records first: a batch made under load holds
/// up to 8,192, and the ring stays within 128 × 1,024 hashes, about 1.2 MB.
const SLOT_MAX_HASHES: usize = 1_024;

fn slot_key(sequence: u64) -> String {
    format!("{RECENT_PREFIXES}.{}", sequence % SLOTS)
}

/// Keeps `records`, a batch just sent to the peers (oldest first), for the workers
/// that join later.
pub fn keep(host: &dyn Host, records: &[PrefixRecord]) -> Result<(), UpdateError<()>> {
    let newest = newest_within(records, SLOT_MAX_HASHES);
    if newest.is_empty() {
        return Ok(());
    }
    let mut sequence = 0;
    host.update_shared_data(RECENT_PREFIXES, |current| {
        sequence = current.map_or(0, generation::decode);
        Ok::<_, ()>(sequence.wrapping_add(1).to_le_bytes())
    })?;
    let mut value = sequence.to_le_bytes().to_vec();
    value.extend_from_slice(&PrefixRecord::encode_all(newest));
    host.set_shared_data(&slot_key(sequence), &value, None).map_err(UpdateError::Host)
}

/// The records kept, oldest first: what a worker applies when it joins.
pub fn read(host: &dyn Host) -> Vec<PrefixRecord> {
    let head = generation::read(host, RECENT_PREFIXES);
    let mut records = Vec::new();
    for sequence in head.saturating_sub(SLOTS)..head {
        let Some(value) = host.shared_value(&slot_key(sequence)) else { continue };
        let Some((stamp, batch)) = value.split_first_chunk::<8>() else { continue };
        if u64::from_le_bytes(*stamp) != sequence {
            continue;
        }
        records.extend(PrefixRecord::decode_all(batch).unwrap_or_default());
    }
    records
}

/// The newest records of `records` (oldest first) that hold at most `max_hashes`
/// hashes together.
fn newest_within(records: &[PrefixRecord], max_hashes: usize) -> &[PrefixRecord] {
    let mut total = 0usize;
    let kept = records
        .iter()
        .rev()
        .take_while(|r| {
            total = total.saturating_add(r.hashes.len());
            total <= max_hashes
        })
        .count();
    records.get(records.len().saturating_sub(kept)..).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::fake::FakeEnvoy;
    use crate::test_support::{VM_ID, pod, router_config};

    fn record(first_hash: u64, hashes: usize) -> PrefixRecord {
        PrefixRecord::blocks(pod("10.0.0.1:8000"), (first_hash..first_hash + hashes as u64).collect())
    }

    fn first_hashes(records: &[PrefixRecord]) -> Vec<u64> {
        records.iter().filter_map(|r| r.hashes.first().copied()).collect()
    }

    #[test]
    fn a_batch_keeps_its_newest_records_within_the_bound() {
        let batch: Vec<PrefixRecord> = (0..4).map(|i| record(i * 100, 10)).collect();
        assert_eq!(first_hashes(newest_within(&batch, 25)), [200, 300]);
        assert_eq!(first_hashes(newest_within(&batch, 40)), [0, 100, 200, 300], "at the bound all stay");
        assert!(newest_within(&batch, 9).is_empty(), "a record is kept whole or not at all");
    }

    #[test]
    fn the_ring_returns_the_newest_batches_oldest_first() {
        let envoy = FakeEnvoy::new();
        let worker = envoy.start(VM_ID, &router_config(false));
        let host = &*worker.host;
        assert!(read(host).is_empty());
        let written = SLOTS + 3;
        for i in 0..written {
            assert!(keep(host, &[record(i, 1)]).is_ok());
        }
        let kept = first_hashes(&read(host));
        assert_eq!(kept, (3..written).collect::<Vec<_>>(), "the 3 oldest were overwritten");
    }

    #[test]
    fn a_slot_not_holding_its_expected_batch_is_skipped() {
        let envoy = FakeEnvoy::new();
        let worker = envoy.start(VM_ID, &router_config(false));
        let host = &*worker.host;
        for i in 0..3 {
            assert!(keep(host, &[record(i, 1)]).is_ok());
        }
        // Another thread bumped the head and has not written its slot yet.
        assert!(generation::bump(host, RECENT_PREFIXES).is_ok());
        assert_eq!(first_hashes(&read(host)), [0, 1, 2]);
        // A slot holding garbage is skipped too.
        assert!(host.set_shared_data(&slot_key(1), b"short", None).is_ok());
        assert_eq!(first_hashes(&read(host)), [0, 2]);
    }
}
