//! Prefix records as one Envoy worker tells the others: pod and block hashes, in
//! MessagePack, several records to a message. Bounded on decode so a corrupt message
//! cannot allocate much.

use serde::{Deserialize, Serialize};

use crate::endpoint::Endpoint;

/// Most hashes one message may carry, over all its records.
pub const MAX_RECORD_HASHES: usize = 65_536;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixRecord {
    pub pod: Endpoint,
    pub hashes: Vec<u64>,
}

impl PrefixRecord {
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
            PrefixRecord { pod: "10.0.0.1:8000".parse().unwrap(), hashes: vec![1, u64::MAX, 3] },
            PrefixRecord { pod: "10.0.0.2:8000".parse().unwrap(), hashes: vec![7] },
        ];
        assert_eq!(PrefixRecord::decode_all(&PrefixRecord::encode_all(&records)), Some(records));
        assert_eq!(PrefixRecord::decode_all(b"\xc1\x00garbage"), None);
    }

    #[test]
    fn a_message_over_the_hash_bound_is_refused() {
        let pod: Endpoint = "10.0.0.1:8000".parse().unwrap();
        let records = vec![PrefixRecord { pod, hashes: vec![1; MAX_RECORD_HASHES / 2 + 1] }; 2];
        assert_eq!(PrefixRecord::decode_all(&PrefixRecord::encode_all(&records)), None);
    }
}
