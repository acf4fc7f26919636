//! Prefix affinity: which pods probably hold a prompt's leading KV blocks.
//!
//! The router cannot see a pod's cache, so it remembers where it sent each prompt's
//! blocks, in the same chained-hash form the engines use, and forgets them in the same
//! least-recently-used order, within each pod's real KV capacity.

mod hashing;
mod index;
mod record;

pub use hashing::prompt_block_hashes;
pub use index::PrefixIndex;
pub use record::{AdapterLoad, MAX_RECORD_HASHES, PrefixRecord};
