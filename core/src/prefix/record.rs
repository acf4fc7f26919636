//! A prefix record as one Envoy worker tells the others: pod and block hashes, in
//! MessagePack. Bounded on decode so a corrupt record cannot allocate much.

use serde::{Deserialize, Serialize};

use crate::endpoint::Endpoint;

/// Most hashes one record may carry.
pub const MAX_RECORD_HASHES: usize = 65_536;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixRecord {
    pub pod: Endpoint,
    pub hashes: Vec<u64>,
}

impl PrefixRecord {
    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() > MAX_RECORD_HASHES * 9 + 64 {
            return None;
        }
        let record: PrefixRecord = rmp_serde::from_slice(bytes).ok()?;
        (record.hashes.len() <= MAX_RECORD_HASHES).then_some(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_garbage() {
        let record = PrefixRecord { pod: "10.0.0.1:8000".parse().unwrap(), hashes: vec![1, u64::MAX, 3] };
        assert_eq!(PrefixRecord::decode(&record.encode()), Some(record));
        assert_eq!(PrefixRecord::decode(b"\xc1\x00garbage"), None);
    }
}
