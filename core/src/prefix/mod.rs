//! Prefix affinity: which pods probably hold a prompt's leading KV blocks.
//!
//! The router cannot see a pod's cache, so it remembers where it sent each prompt, as
//! keys that each stand for the prompt up to a block (the engines chain their block
//! hashes alike), and forgets them in the engines' least-recently-used order, within
//! each pod's real KV capacity. A prompt of any length, up to the body limit, is hashed
//! whole, in one pass as its text arrives, into a few hundred keys spaced ever more
//! widely (`anchors.rs`), and a pod's longest match is a binary search over them.

pub mod anchors;
mod hashing;
mod index;
mod record;

pub use hashing::{PrefixChain, PromptHasher, PromptHashes, SectionHasher};
pub use index::PrefixIndex;
pub use record::{AdapterLoad, MAX_RECORD_HASHES, PrefixRecord};
