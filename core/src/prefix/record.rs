//! Prefix records as one Envoy worker tells the others: pod and block hashes, and the
//! adapter load the decision started there, if any, in MessagePack, several records to
//! a message. Bounded on decode so a corrupt message cannot allocate much.

use serde::{Deserialize, Serialize};

use crate::endpoint::Endpoint;

/// Most hashes one message may carry, over all its records.
pub const MAX_RECORD_HASHES: usize = 65_536;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixRecord {
    pub pod: Endpoint,
    pub hashes: Vec<u64>,
    /// The adapter the decision sent to `pod` that the pod's adapter lists did not
    /// show: the other workers of the same Envoy count it there until a scrape of the
    /// pod lists it (`router/adapter_loads.rs`). Never passed to other replicas: its
    /// time is this host's clock (the control listener strips it both ways).
    ///
    /// The worker queues encode a record as an array (`encode_all`), and a reader of
    /// an older build refuses an array longer than it knows: so this field is last,
    /// left out when empty (a record without one reads as before it existed), and any
    /// later field must be too. During a plugin update, an older build's worker drops
    /// a batch holding a load; the digest and snapshots encode records as maps, where
    /// older readers skip unknown keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_load: Option<AdapterLoad>,
}

/// An adapter load a decision started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterLoad {
    pub adapter: String,
    /// The deciding gateway's clock.
    pub sent_at_ms: u64,
}

impl PrefixRecord {
    /// A record of blocks only.
    pub fn blocks(pod: Endpoint, hashes: Vec<u64>) -> Self {
        Self { pod, hashes, adapter_load: None }
    }

    /// One message carrying `records`, oldest first.
    pub fn encode_all(records: &[PrefixRecord]) -> Vec<u8> {
        rmp_serde::to_vec(records).unwrap_or_default()
    }

    pub fn decode_all(bytes: &[u8]) -> Option<Vec<PrefixRecord>> {
        if bytes.len() > MAX_RECORD_HASHES * 9 + 64 * 1024 {
            return None;
        }
        let records: Vec<PrefixRecord> = rmp_serde::from_slice(bytes).ok()?;
        let hashes: usize = records.iter().map(|r| r.hashes.len()).sum();
        (hashes <= MAX_RECORD_HASHES).then_some(records)
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
                hashes: vec![7],
                adapter_load: Some(AdapterLoad { adapter: "sql".into(), sent_at_ms: 1_700_000_000_000 }),
            },
        ];
        assert_eq!(PrefixRecord::decode_all(&PrefixRecord::encode_all(&records)), Some(records));
        assert_eq!(PrefixRecord::decode_all(b"\xc1\x00garbage"), None);
    }

    #[test]
    fn records_without_an_adapter_load_read_as_before_it_existed_both_ways() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Before {
            pod: Endpoint,
            hashes: Vec<u64>,
        }
        let pod: Endpoint = "10.0.0.1:8000".parse().unwrap();
        let bytes = rmp_serde::to_vec(&vec![Before { pod, hashes: vec![5, 6] }]).unwrap();
        assert_eq!(PrefixRecord::decode_all(&bytes), Some(vec![PrefixRecord::blocks(pod, vec![5, 6])]));
        let ours = PrefixRecord::encode_all(&[PrefixRecord::blocks(pod, vec![5, 6])]);
        let old: Vec<Before> = rmp_serde::from_slice(&ours).unwrap();
        assert_eq!(old, [Before { pod, hashes: vec![5, 6] }]);
    }

    #[test]
    fn a_message_over_the_hash_bound_is_refused() {
        let pod: Endpoint = "10.0.0.1:8000".parse().unwrap();
        let records = vec![PrefixRecord::blocks(pod, vec![1; MAX_RECORD_HASHES / 2 + 1]); 2];
        assert_eq!(PrefixRecord::decode_all(&PrefixRecord::encode_all(&records)), None);
    }
}
