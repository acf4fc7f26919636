//! The prefix index a router keeps of its own choices, as llm-d's approximate
//! prefix-cache producer and AIBrix's prefix hash table do: a prompt's block hashes are
//! recorded for the pods it was sent to, in a per-pod LRU; a pod is believed to hold
//! the leading blocks of a prompt that it was sent before. Nothing here reads a pod.

use infergate_core::endpoint::Endpoint;
use infergate_core::prefix::PrefixIndex;
use infergate_core::wire::CHARS_PER_TOKEN;
use xxhash_rust::xxh64::xxh64;

use crate::fleet::pod_endpoint;

pub(crate) struct RoutedIndex {
    index: PrefixIndex,
    endpoints: Vec<Endpoint>,
    /// Blocks per pod before the least recently routed go.
    capacity: Vec<u64>,
}

impl RoutedIndex {
    pub(crate) fn new(pods: usize, capacity_blocks: u64) -> Self {
        Self {
            index: PrefixIndex::new(u32::MAX),
            endpoints: (0..pods).map(pod_endpoint).collect(),
            capacity: vec![capacity_blocks.max(1); pods],
        }
    }

    /// Sets `pod`'s LRU size (llm-d sizes it from the pod's `num_gpu_blocks`).
    pub(crate) fn set_capacity(&mut self, pod: usize, blocks: u64) {
        if let Some(c) = self.capacity.get_mut(pod) {
            *c = blocks.max(1);
        }
    }

    /// How many leading blocks of `hashes` `pod` is believed to hold.
    pub(crate) fn matched(&self, pod: usize, hashes: &[u64]) -> usize {
        self.endpoints.get(pod).map_or(0, |&e| self.index.matched_keys(e, hashes))
    }

    /// `pod` was sent the prompt of `hashes`. The LRU takes them first to last, so a
    /// prompt's first block is its least recently used (the index takes keys last to
    /// first, hence the reversal).
    pub(crate) fn record(&mut self, pod: usize, hashes: &[u64]) {
        let (Some(&endpoint), Some(&capacity)) = (self.endpoints.get(pod), self.capacity.get(pod)) else { return };
        let added: Vec<u64> = hashes.iter().rev().copied().collect();
        self.index.record(endpoint, &added, &[], capacity);
    }
}

/// A prompt's chain of block hashes, salted with the model: blocks of `block_tokens`
/// pseudo-tokens of 4 bytes, the last one possibly partial, at most `max_tokens` in
/// all (0: no limit).
pub(crate) fn block_hashes(prompt: &[u8], model: &str, block_tokens: usize, max_tokens: usize) -> Vec<u64> {
    let block_tokens = block_tokens.max(1);
    let limit = if max_tokens == 0 { usize::MAX } else { max_tokens / block_tokens };
    let mut parent = xxh64(model.as_bytes(), 0);
    prompt
        .chunks(block_tokens * CHARS_PER_TOKEN)
        .take(limit)
        .map(|block| {
            parent = xxh64(block, parent);
            parent
        })
        .collect()
}
