//! Prefix records as one Envoy worker tells the others: pod, prefix keys and the block
//! each ends at, and the adapter load the decision started there, if any, in
//! MessagePack, several records to a message. Bounded on decode so a corrupt message
//! cannot allocate much.

use serde::{Deserialize, Serialize};

use super::PrefixChain;
use crate::endpoint::Endpoint;

/// Most hashes one message may carry, over all its records.
pub const MAX_RECORD_HASHES: usize = 65_536;

/// Most bytes of a message: each hash takes at most 9, its end at most 5.
const MAX_MESSAGE_BYTES: usize = MAX_RECORD_HASHES * 14 + 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixRecord {
    pub pod: Endpoint,
    /// The prompt's prefix keys (`PrefixChain::keys`).
    pub hashes: Vec<u64>,
    /// The adapter the decision sent to `pod` that the pod's adapter lists did not
    /// show: the other workers of the same Envoy count it there until a scrape of the
    /// pod lists it (`router/adapter_loads.rs`). Never passed to other replicas: its
    /// time is this host's clock (the control listener strips it both ways).
    ///
    /// Left out when empty; records are encoded as maps everywhere, so readers of an
    /// older build skip the keys they do not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_load: Option<AdapterLoad>,
    /// The block each key ends at (`PrefixChain::ends`). Empty in a record of a build
    /// that keyed every block, whose keys each stand for one block.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ends: Vec<u32>,
}

/// An adapter load a decision started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterLoad {
    pub adapter: String,
    /// The deciding gateway's clock.
    pub sent_at_ms: u64,
}

impl PrefixRecord {
    /// A record of keys that stand for one block each.
    pub fn blocks(pod: Endpoint, hashes: Vec<u64>) -> Self {
        Self { pod, hashes, adapter_load: None, ends: Vec::new() }
    }

    /// A record of a prompt's keys only.
    pub fn of_chain(pod: Endpoint, chain: &PrefixChain) -> Self {
        Self { pod, hashes: chain.keys.clone(), adapter_load: None, ends: chain.ends.clone() }
    }

    /// One message carrying `records`, oldest first.
    pub fn encode_all(records: &[PrefixRecord]) -> Vec<u8> {
        rmp_serde::to_vec_named(records).unwrap_or_default()
    }

    pub fn decode_all(bytes: &[u8]) -> Option<Vec<PrefixRecord>> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return None;
        }
        let records: Vec<PrefixRecord> = rmp_serde::from_slice(bytes).ok()?;
        let hashes: usize = records.iter().map(|r| r.hashes.len()).sum();
        let ends_fit = records.iter().all(|r| r.ends.is_empty() || r.ends.len() == r.hashes.len());
        (hashes <= MAX_RECORD_HASHES && ends_fit).then_some(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_garbage() {
        let records = vec![
            PrefixRecord::blocks("10.0.0.1:8000".parse().unwrap(), vec![1, u64::MAX, 3]),
            PrefixRecord {
                pod: "10.0.0.2:8000".parse().unwrap(),
                hashes: vec![7, 8],
                adapter_load: Some(AdapterLoad { adapter: "sql".into(), sent_at_ms: 1_700_000_000_000 }),
                ends: vec![64, 128],
            },
        ];
        assert_eq!(PrefixRecord::decode_all(&PrefixRecord::encode_all(&records)), Some(records.clone()));
        assert_eq!(PrefixRecord::decode_all(b"\xc1\x00garbage"), None);
        let mut uneven = records[1].clone();
        uneven.ends.pop();
        assert_eq!(PrefixRecord::decode_all(&PrefixRecord::encode_all(&[uneven])), None, "an end per key");
    }

    #[test]
    fn records_of_an_older_build_read_as_one_block_a_key_both_ways() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Before {
            pod: Endpoint,
            hashes: Vec<u64>,
        }
        let pod: Endpoint = "10.0.0.1:8000".parse().unwrap();
        // Older builds sent arrays to the worker queues and maps elsewhere.
        let arrays = rmp_serde::to_vec(&vec![Before { pod, hashes: vec![5, 6] }]).unwrap();
        let maps = rmp_serde::to_vec_named(&vec![Before { pod, hashes: vec![5, 6] }]).unwrap();
        for bytes in [arrays, maps] {
            assert_eq!(PrefixRecord::decode_all(&bytes), Some(vec![PrefixRecord::blocks(pod, vec![5, 6])]));
        }
        let ours = PrefixRecord { ends: vec![3, 9], ..PrefixRecord::blocks(pod, vec![5, 6]) };
        let old: Vec<Before> = rmp_serde::from_slice(&PrefixRecord::encode_all(&[ours])).unwrap();
        assert_eq!(old, [Before { pod, hashes: vec![5, 6] }]);
    }

    #[test]
    fn a_message_over_the_hash_bound_is_refused() {
        let pod: Endpoint = "10.0.0.1:8000".parse().unwrap();
        let records = vec![PrefixRecord::blocks(pod, vec![1; MAX_RECORD_HASHES / 2 + 1]); 2];
        assert_eq!(PrefixRecord::decode_all(&PrefixRecord::encode_all(&records)), None);
    }
}
