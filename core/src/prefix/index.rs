//! The per-worker prefix index: for each pod, the block hashes it probably holds, in
//! least-recently-used order and bounded by the pod's KV capacity; for each block, at
//! most `max_owners` pods.
//!
//! Every answered request records all its blocks (64 for a 4 KiB prompt), so this is
//! the hottest structure of the filter. Block hashes are already xxHash64 outputs, so
//! the maps use them as their own hash; the LRU order is an append-only queue in which
//! re-used blocks leave stale entries that eviction skips and compaction drops; owners
//! are pod numbers, held inline when there is one (unshared blocks are most blocks).

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;

use nohash_hasher::NoHashHasher;
use smallvec::SmallVec;

use crate::endpoint::Endpoint;

/// Maps keyed by block hashes, which are uniformly distributed already.
type HashKeyed<V> = HashMap<u64, V, BuildHasherDefault<NoHashHasher<u64>>>;

/// Pods are numbered on first sight; the number outlives `forget` so that it stays
/// stable for a pod that comes back.
type PodId = u32;

/// Stale queue entries allowed beyond one per live block before compacting.
const COMPACT_SLACK: usize = 1024;

#[derive(Debug, Default)]
struct PodBlocks {
    /// hash → last use.
    stamps: HashKeyed<u64>,
    /// (last use, hash) in use order; an entry whose stamp no longer matches
    /// `stamps` is stale.
    order: VecDeque<(u64, u64)>,
}

impl PodBlocks {
    fn touch(&mut self, hash: u64, clock: u64) {
        self.stamps.insert(hash, clock);
        self.order.push_back((clock, hash));
        if self.order.len() > 2 * self.stamps.len() + COMPACT_SLACK {
            let stamps = &self.stamps;
            self.order.retain(|(stamp, hash)| stamps.get(hash) == Some(stamp));
        }
    }

    /// Removes and returns the least recently used block.
    fn pop_oldest(&mut self) -> Option<u64> {
        while let Some((stamp, hash)) = self.order.pop_front() {
            if self.stamps.get(&hash) == Some(&stamp) {
                self.stamps.remove(&hash);
                return Some(hash);
            }
        }
        None
    }
}

#[derive(Debug)]
pub struct PrefixIndex {
    pods: HashMap<Endpoint, PodBlocks>,
    ids: HashMap<Endpoint, PodId>,
    endpoints: Vec<Endpoint>,
    /// hash → (pod, last use), at most `max_owners` each.
    owners: HashKeyed<SmallVec<[(PodId, u64); 1]>>,
    max_owners: usize,
    clock: u64,
}

impl PrefixIndex {
    pub fn new(max_owners: u32) -> Self {
        Self {
            pods: HashMap::new(),
            ids: HashMap::new(),
            endpoints: Vec::new(),
            owners: HashKeyed::default(),
            max_owners: (max_owners as usize).max(1),
            clock: 0,
        }
    }

    /// How many leading blocks of `hashes` `pod` holds: the strict longest prefix.
    pub fn matched_blocks(&self, pod: Endpoint, hashes: &[u64]) -> usize {
        self.pods.get(&pod).map_or(0, |blocks| hashes.iter().take_while(|h| blocks.stamps.contains_key(h)).count())
    }

    fn id_of(&mut self, pod: Endpoint) -> PodId {
        if let Some(&id) = self.ids.get(&pod) {
            return id;
        }
        let id = PodId::try_from(self.endpoints.len()).unwrap_or(PodId::MAX);
        self.endpoints.push(pod);
        self.ids.insert(pod, id);
        id
    }

    /// Records that `pod` now holds `hashes`, evicting its least recently used blocks
    /// beyond `capacity_blocks`, and the least recent other owner of a block that has
    /// `max_owners` already.
    pub fn record(&mut self, pod: Endpoint, hashes: &[u64], capacity_blocks: usize) {
        let id = self.id_of(pod);
        for &hash in hashes {
            self.clock += 1;
            let clock = self.clock;
            let owners = self.owners.entry(hash).or_default();
            if let Some(entry) = owners.iter_mut().find(|(p, _)| *p == id) {
                entry.1 = clock;
            } else {
                if owners.len() >= self.max_owners {
                    let oldest = owners.iter().enumerate().min_by_key(|(_, (_, stamp))| *stamp).map(|(i, _)| i);
                    if let Some(index) = oldest {
                        let (evicted, _) = owners.swap_remove(index);
                        let evicted = self.endpoints.get(evicted as usize).copied();
                        if let Some(blocks) = evicted.and_then(|e| self.pods.get_mut(&e)) {
                            // Its queue entry goes stale and is skipped later.
                            blocks.stamps.remove(&hash);
                        }
                    }
                }
                owners.push((id, clock));
            }
            self.pods.entry(pod).or_default().touch(hash, clock);
        }
        self.trim(pod, id, capacity_blocks.max(1));
    }

    fn trim(&mut self, pod: Endpoint, id: PodId, capacity: usize) {
        let Some(blocks) = self.pods.get_mut(&pod) else { return };
        while blocks.stamps.len() > capacity {
            let Some(hash) = blocks.pop_oldest() else { break };
            if let Some(owners) = self.owners.get_mut(&hash) {
                owners.retain(|(p, _)| *p != id);
                if owners.is_empty() {
                    self.owners.remove(&hash);
                }
            }
        }
    }

    /// Drops a pod that left the pool.
    pub fn forget(&mut self, pod: Endpoint) {
        let Some(&id) = self.ids.get(&pod) else { return };
        if let Some(blocks) = self.pods.remove(&pod) {
            for hash in blocks.stamps.keys() {
                if let Some(owners) = self.owners.get_mut(hash) {
                    owners.retain(|(p, _)| *p != id);
                    if owners.is_empty() {
                        self.owners.remove(hash);
                    }
                }
            }
        }
    }

    pub fn blocks_of(&self, pod: Endpoint) -> usize {
        self.pods.get(&pod).map_or(0, |b| b.stamps.len())
    }

    pub fn total_entries(&self) -> usize {
        self.pods.values().map(|b| b.stamps.len()).sum()
    }

    pub fn pods(&self) -> impl Iterator<Item = &Endpoint> {
        self.pods.keys()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn pod(port: u16) -> Endpoint {
        Endpoint::new(std::net::SocketAddr::from(([10, 0, 0, 1], port)))
    }

    #[test]
    fn the_match_is_the_strict_longest_prefix() {
        let mut index = PrefixIndex::new(4);
        index.record(pod(1), &[1, 2, 3], 100);
        assert_eq!(index.matched_blocks(pod(1), &[1, 2, 3, 4]), 3);
        assert_eq!(index.matched_blocks(pod(1), &[1, 9, 3]), 1, "a gap ends the match");
        assert_eq!(index.matched_blocks(pod(2), &[1, 2]), 0);
    }

    #[test]
    fn a_pod_forgets_its_least_recently_used_blocks_beyond_capacity() {
        let mut index = PrefixIndex::new(4);
        index.record(pod(1), &[1, 2], 3);
        index.record(pod(1), &[3, 4], 3);
        assert_eq!(index.blocks_of(pod(1)), 3);
        assert_eq!(index.matched_blocks(pod(1), &[1]), 0, "block 1 was the oldest");
        assert_eq!(index.matched_blocks(pod(1), &[2]), 1);
    }

    #[test]
    fn a_block_has_at_most_max_owners() {
        let mut index = PrefixIndex::new(2);
        for p in 1..=3 {
            index.record(pod(p), &[42], 10);
        }
        let holders = (1..=3).filter(|&p| index.matched_blocks(pod(p), &[42]) == 1).count();
        assert_eq!(holders, 2);
        assert_eq!(index.matched_blocks(pod(1), &[42]), 0, "the least recent owner was replaced");
    }

    #[test]
    fn a_block_used_again_is_the_last_evicted() {
        let mut index = PrefixIndex::new(4);
        index.record(pod(1), &[1, 2, 3], 3);
        index.record(pod(1), &[1], 3);
        index.record(pod(1), &[4], 3);
        assert_eq!(index.matched_blocks(pod(1), &[1]), 1, "block 1 was used again");
        assert_eq!(index.matched_blocks(pod(1), &[2]), 0, "block 2 was the least recent");
    }

    #[test]
    fn repeated_hits_do_not_grow_the_eviction_queue_without_bound() {
        let mut index = PrefixIndex::new(4);
        for _ in 0..10_000 {
            index.record(pod(1), &[1, 2, 3, 4], 100);
        }
        let blocks = index.pods.get(&pod(1)).unwrap();
        assert!(blocks.order.len() <= 2 * blocks.stamps.len() + COMPACT_SLACK, "{}", blocks.order.len());
    }

    #[test]
    fn forgetting_a_pod_removes_its_blocks() {
        let mut index = PrefixIndex::new(4);
        index.record(pod(1), &[1, 2], 10);
        index.forget(pod(1));
        assert_eq!(index.total_entries(), 0);
    }

    proptest! {
        #[test]
        fn memory_stays_within_each_pods_capacity(
            records in proptest::collection::vec((0u16..6, proptest::collection::vec(0u64..500, 1..40)), 1..200),
            capacity in 1usize..64,
            max_owners in 1u32..4,
        ) {
            let mut index = PrefixIndex::new(max_owners);
            for (p, hashes) in &records {
                index.record(pod(*p), hashes, capacity);
            }
            for p in 0..6 {
                prop_assert!(index.blocks_of(pod(p)) <= capacity);
                if let Some(blocks) = index.pods.get(&pod(p)) {
                    prop_assert!(blocks.order.len() <= 2 * blocks.stamps.len() + COMPACT_SLACK);
                }
            }
            for owners in index.owners.values() {
                prop_assert!(owners.len() <= max_owners as usize);
                prop_assert!(!owners.is_empty());
            }
            let from_owners: usize = index.owners.values().map(|o| o.len()).sum();
            prop_assert_eq!(from_owners, index.total_entries());
        }
    }
}
