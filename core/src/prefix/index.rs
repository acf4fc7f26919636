//! The per-worker prefix index: for each pod, the block hashes it probably holds, in
//! least-recently-used order and bounded by the pod's KV capacity; for each block, at
//! most `max_owners` pods.

use std::collections::{BTreeMap, HashMap};

use crate::endpoint::Endpoint;

#[derive(Debug, Default)]
struct PodBlocks {
    /// hash → last use.
    stamps: HashMap<u64, u64>,
    /// last use → hash: the eviction order.
    order: BTreeMap<u64, u64>,
}

#[derive(Debug)]
pub struct PrefixIndex {
    pods: HashMap<Endpoint, PodBlocks>,
    /// hash → (pod, last use), at most `max_owners` each.
    owners: HashMap<u64, Vec<(Endpoint, u64)>>,
    max_owners: usize,
    clock: u64,
}

impl PrefixIndex {
    pub fn new(max_owners: u32) -> Self {
        Self { pods: HashMap::new(), owners: HashMap::new(), max_owners: (max_owners as usize).max(1), clock: 0 }
    }

    /// How many leading blocks of `hashes` `pod` holds: the strict longest prefix.
    pub fn matched_blocks(&self, pod: Endpoint, hashes: &[u64]) -> usize {
        self.pods.get(&pod).map_or(0, |blocks| hashes.iter().take_while(|h| blocks.stamps.contains_key(h)).count())
    }

    /// Records that `pod` now holds `hashes`, evicting its least recently used blocks
    /// beyond `capacity_blocks`, and the least recent other owner of a block that has
    /// `max_owners` already.
    pub fn record(&mut self, pod: Endpoint, hashes: &[u64], capacity_blocks: usize) {
        for &hash in hashes {
            self.clock += 1;
            let clock = self.clock;
            let owners = self.owners.entry(hash).or_default();
            if let Some(entry) = owners.iter_mut().find(|(p, _)| *p == pod) {
                entry.1 = clock;
            } else {
                if owners.len() >= self.max_owners {
                    let oldest = owners.iter().enumerate().min_by_key(|(_, (_, stamp))| *stamp).map(|(i, _)| i);
                    if let Some(index) = oldest {
                        let (evicted, _) = owners.swap_remove(index);
                        if let Some(blocks) = self.pods.get_mut(&evicted) {
                            if let Some(stamp) = blocks.stamps.remove(&hash) {
                                blocks.order.remove(&stamp);
                            }
                        }
                    }
                }
                owners.push((pod, clock));
            }
            let blocks = self.pods.entry(pod).or_default();
            if let Some(old) = blocks.stamps.insert(hash, clock) {
                blocks.order.remove(&old);
            }
            blocks.order.insert(clock, hash);
        }
        self.trim(pod, capacity_blocks.max(1));
    }

    fn trim(&mut self, pod: Endpoint, capacity: usize) {
        let Some(blocks) = self.pods.get_mut(&pod) else { return };
        while blocks.stamps.len() > capacity {
            let Some((_, hash)) = blocks.order.pop_first() else { break };
            blocks.stamps.remove(&hash);
            if let Some(owners) = self.owners.get_mut(&hash) {
                owners.retain(|(p, _)| *p != pod);
                if owners.is_empty() {
                    self.owners.remove(&hash);
                }
            }
        }
    }

    /// Drops a pod that left the pool.
    pub fn forget(&mut self, pod: Endpoint) {
        if let Some(blocks) = self.pods.remove(&pod) {
            for hash in blocks.stamps.keys() {
                if let Some(owners) = self.owners.get_mut(hash) {
                    owners.retain(|(p, _)| *p != pod);
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
            }
            for owners in index.owners.values() {
                prop_assert!(owners.len() <= max_owners as usize);
                prop_assert!(!owners.is_empty());
            }
            let from_owners: usize = index.owners.values().map(Vec::len).sum();
            prop_assert_eq!(from_owners, index.total_entries());
        }
    }
}
