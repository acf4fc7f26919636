//! Two little-endian u64 words in one shared-data value, rewritten with
//! compare-and-swap by every worker: a pod's load, a cluster's backlog.

use crate::host::{Host, UpdateError};

/// The pair under `key`; absent or short values read as zeros.
pub fn read(host: &dyn Host, key: &str) -> (u64, u64) {
    decode(host.shared_value(key).as_deref())
}

fn decode(bytes: Option<&[u8]>) -> (u64, u64) {
    let word = |range: std::ops::Range<usize>| {
        bytes.and_then(|b| b.get(range)).and_then(|b| <[u8; 8]>::try_from(b).ok()).map_or(0, u64::from_le_bytes)
    };
    (word(0..8), word(8..16))
}

fn encode((first, second): (u64, u64)) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    let (head, tail) = bytes.split_at_mut(8);
    head.copy_from_slice(&first.to_le_bytes());
    tail.copy_from_slice(&second.to_le_bytes());
    bytes
}

/// Rewrites the pair under `key` from its current value; `change` returns `None` to
/// leave it. A write that fails is logged and dropped: these are estimates, and the
/// next request or snapshot corrects them.
pub fn update(host: &dyn Host, key: &str, change: impl Fn((u64, u64)) -> Option<(u64, u64)>) {
    match host.update_shared_data(key, |current| change(decode(current)).map(encode).ok_or(())) {
        Ok(()) | Err(UpdateError::Declined(())) => {}
        Err(UpdateError::Contended) => log::warn!("infergate: {key} not updated: contended"),
        Err(UpdateError::Host(status)) => log::warn!("infergate: cannot update {key}: {status:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_round_trips_and_short_values_read_as_zeros() {
        assert_eq!(decode(Some(&encode((7, 4_000)))), (7, 4_000));
        assert_eq!(decode(Some(&[1, 2, 3])), (0, 0));
        assert_eq!(decode(None), (0, 0));
    }
}
