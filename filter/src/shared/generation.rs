//! A generation: an 8-byte little-endian counter in shared data that a writer bumps
//! after it stored a bigger value (a snapshot, a summary, a load push), so that each worker reads
//! the small counter per request and the big value only when it moved.

use crate::host::{Host, UpdateError};

/// Reads the 8-byte little-endian generation; anything else reads as 0.
pub fn decode(bytes: &[u8]) -> u64 {
    <[u8; 8]>::try_from(bytes).map_or(0, u64::from_le_bytes)
}

/// Adds one to the generation under `key`, with compare-and-swap: every worker's
/// control context may store.
pub fn bump(host: &dyn Host, key: &str) -> Result<(), UpdateError<()>> {
    host.update_shared_data(key, |current| Ok::<_, ()>(current.map_or(0, decode).wrapping_add(1).to_le_bytes()))
}

/// The generation under `key`, 0 if absent.
pub fn read(host: &dyn Host, key: &str) -> u64 {
    host.shared_value(key).map_or(0, |bytes| decode(&bytes))
}
