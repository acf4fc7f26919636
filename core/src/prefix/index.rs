//! The per-worker prefix index: for each pod, the block hashes it probably holds, in
//! least-recently-used order and bounded by the pod's KV capacity; for each block, at
//! most `max_owners` pods.
//!
//! Every answered request records all its blocks (64 for a 4 KiB prompt), so this is
//! the hottest structure of the filter. One map, from block hash to its owners with the
//! time each last used it, answers both "does this pod hold this block" and "who to
//! evict"; block hashes are already xxHash64 outputs, so the map uses them as their own
//! hash. Each pod's LRU order is an append-only queue in which re-used or stolen blocks
//! leave stale entries that eviction skips and compaction drops. Owners are pod numbers,
//! held inline when there is one (unshared blocks are most blocks).
//!
//! A block a later request matched on a pod is marked reused there: a prefix that
//! serves more than one request, as opposed to the tail of one prompt. Each pod counts
//! its reused blocks, so that the router can tell a cache full of prefixes in use from
//! one full of old tails, which evicting costs nothing.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;

use nohash_hasher::NoHashHasher;
use smallvec::SmallVec;

use crate::endpoint::Endpoint;

/// Maps keyed by block hashes, which are uniformly distributed already.
type HashKeyed<V> = HashMap<u64, V, BuildHasherDefault<NoHashHasher<u64>>>;

/// Pods are numbered on first sight; a forgotten pod's number, which no block lists any
/// more, goes to the next new pod, so churn does not grow the index.
type PodId = u32;

/// One pod holding a block: when it last used it, and whether a later request matched
/// it there.
#[derive(Debug, Clone, Copy)]
struct Owner {
    pod: PodId,
    reused: bool,
    stamp: u64,
}

/// Who holds one block.
type Owners = SmallVec<[Owner; 1]>;

/// Stale queue entries allowed beyond one per live block before compacting.
const COMPACT_SLACK: usize = 1024;

#[derive(Debug, Default)]
struct PodBlocks {
    /// Blocks this pod owns now.
    held: usize,
    /// Of them, blocks a later request matched.
    reused: usize,
    /// (stamp, hash), oldest first; an entry is live only while the block's owners list
    /// this pod with this stamp.
    order: VecDeque<(u64, u64)>,
}

fn owns(owners: &Owners, id: PodId) -> bool {
    owners.iter().any(|o| o.pod == id)
}

fn is_live(owners: &HashKeyed<Owners>, id: PodId, stamp: u64, hash: u64) -> bool {
    owners.get(&hash).is_some_and(|o| o.iter().any(|o| o.pod == id && o.stamp == stamp))
}

impl PodBlocks {
    /// `owner` no longer holds its block.
    fn lose(&mut self, owner: Owner) {
        self.held = self.held.saturating_sub(1);
        if owner.reused {
            self.reused = self.reused.saturating_sub(1);
        }
    }
}

#[derive(Debug)]
pub struct PrefixIndex {
    ids: HashMap<Endpoint, PodId>,
    /// Indexed by `PodId`.
    pods: Vec<PodBlocks>,
    /// Numbers of forgotten pods, free for reuse.
    free: Vec<PodId>,
    owners: HashKeyed<Owners>,
    max_owners: usize,
    clock: u64,
}

impl PrefixIndex {
    pub fn new(max_owners: u32) -> Self {
        Self {
            ids: HashMap::new(),
            pods: Vec::new(),
            free: Vec::new(),
            owners: HashKeyed::default(),
            max_owners: (max_owners as usize).max(1),
            clock: 0,
        }
    }

    /// How many of `hashes`, from the first, `pod` holds: a gap ends the match, as it
    /// does in the engine's cache.
    pub fn matched_blocks(&self, pod: Endpoint, hashes: &[u64]) -> usize {
        let Some(&id) = self.ids.get(&pod) else { return 0 };
        hashes.iter().take_while(|h| self.owners.get(h).is_some_and(|o| owns(o, id))).count()
    }

    fn id_of(&mut self, pod: Endpoint) -> PodId {
        if let Some(&id) = self.ids.get(&pod) {
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.pods.push(PodBlocks::default());
                PodId::try_from(self.pods.len() - 1).unwrap_or(PodId::MAX)
            }
        };
        self.ids.insert(pod, id);
        id
    }

    /// `pod` now holds `hashes` (it just served a prompt made of them), and at most
    /// `capacity_blocks` blocks in all.
    pub fn record(&mut self, pod: Endpoint, hashes: &[u64], capacity_blocks: usize) {
        let id = self.id_of(pod);
        for &hash in hashes {
            self.clock += 1;
            let clock = self.clock;
            let owners = self.owners.entry(hash).or_default();
            if let Some(entry) = owners.iter_mut().find(|o| o.pod == id) {
                entry.stamp = clock;
            } else {
                if owners.len() >= self.max_owners {
                    let oldest = owners.iter().enumerate().min_by_key(|(_, o)| o.stamp).map(|(i, _)| i);
                    if let Some(index) = oldest {
                        let evicted = owners.swap_remove(index);
                        if let Some(blocks) = self.pods.get_mut(evicted.pod as usize) {
                            blocks.lose(evicted);
                        }
                    }
                }
                owners.push(Owner { pod: id, reused: false, stamp: clock });
                if let Some(blocks) = self.pods.get_mut(id as usize) {
                    blocks.held += 1;
                }
            }
            if let Some(blocks) = self.pods.get_mut(id as usize) {
                blocks.order.push_back((clock, hash));
            }
        }
        self.compact(id);
        self.trim(id, capacity_blocks.max(1));
    }

    /// Drops stale queue entries once they outnumber the live ones.
    fn compact(&mut self, id: PodId) {
        let Some(blocks) = self.pods.get_mut(id as usize) else { return };
        if blocks.order.len() > 2 * blocks.held + COMPACT_SLACK {
            let owners = &self.owners;
            blocks.order.retain(|&(stamp, hash)| is_live(owners, id, stamp, hash));
        }
    }

    /// Evicts `id`'s least recently used blocks beyond `capacity`.
    fn trim(&mut self, id: PodId, capacity: usize) {
        let Some(blocks) = self.pods.get_mut(id as usize) else { return };
        while blocks.held > capacity {
            let Some((stamp, hash)) = blocks.order.pop_front() else { break };
            // One lookup per evicted block: most blocks have one owner, so the entry
            // usually goes with it.
            let Entry::Occupied(mut owners) = self.owners.entry(hash) else { continue };
            let list = owners.get_mut();
            if let Some(index) = list.iter().position(|o| o.pod == id && o.stamp == stamp) {
                blocks.lose(list.swap_remove(index));
            }
            if owners.get().is_empty() {
                owners.remove();
            }
        }
    }

    /// Drops everything `pod` holds (it left the pool).
    pub fn forget(&mut self, pod: Endpoint) {
        let Some(&id) = self.ids.get(&pod) else { return };
        let Some(blocks) = self.pods.get_mut(id as usize) else { return };
        for (_, hash) in blocks.order.drain(..) {
            if let Some(owners) = self.owners.get_mut(&hash) {
                owners.retain(|o| o.pod != id);
                if owners.is_empty() {
                    self.owners.remove(&hash);
                }
            }
        }
        *blocks = PodBlocks::default();
        self.ids.remove(&pod);
        self.free.push(id);
    }

    /// A request routed to `pod` matched the first `matched` of `hashes` there: those
    /// blocks serve more than one request.
    pub fn mark_reused(&mut self, pod: Endpoint, hashes: &[u64], matched: usize) {
        let Some(&id) = self.ids.get(&pod) else { return };
        let Some(blocks) = self.pods.get_mut(id as usize) else { return };
        for hash in hashes.iter().take(matched) {
            let owner = self.owners.get_mut(hash).and_then(|o| o.iter_mut().find(|o| o.pod == id));
            if let Some(owner) = owner.filter(|o| !o.reused) {
                owner.reused = true;
                blocks.reused += 1;
            }
        }
    }

    pub fn blocks_of(&self, pod: Endpoint) -> usize {
        self.ids.get(&pod).and_then(|&id| self.pods.get(id as usize)).map_or(0, |b| b.held)
    }

    /// Blocks `pod` holds that a later request matched there.
    pub fn reused_blocks_of(&self, pod: Endpoint) -> usize {
        self.ids.get(&pod).and_then(|&id| self.pods.get(id as usize)).map_or(0, |b| b.reused)
    }

    pub fn total_entries(&self) -> usize {
        self.pods.iter().map(|b| b.held).sum()
    }

    /// Pods recorded and not forgotten.
    pub fn pods(&self) -> impl Iterator<Item = &Endpoint> {
        self.ids.keys()
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
        let blocks = &index.pods[0];
        assert_eq!(blocks.held, 4);
        assert!(blocks.order.len() <= 2 * blocks.held + COMPACT_SLACK, "{}", blocks.order.len());
    }

    #[test]
    fn blocks_a_later_request_matched_count_as_reused_until_evicted() {
        let mut index = PrefixIndex::new(4);
        index.record(pod(1), &[1, 2, 3], 3);
        assert_eq!(index.reused_blocks_of(pod(1)), 0, "one prompt's blocks");
        index.mark_reused(pod(1), &[1, 2, 9], 2);
        index.mark_reused(pod(1), &[1, 2, 9], 2);
        index.mark_reused(pod(2), &[1, 2, 9], 2);
        assert_eq!((index.reused_blocks_of(pod(1)), index.reused_blocks_of(pod(2))), (2, 0));
        // Two new blocks evict the least recently used: 1, then 2.
        index.record(pod(1), &[3, 7, 8], 3);
        assert_eq!(index.reused_blocks_of(pod(1)), 0);
    }

    #[test]
    fn forgetting_a_pod_removes_its_blocks() {
        let mut index = PrefixIndex::new(4);
        index.record(pod(1), &[1, 2], 10);
        index.forget(pod(1));
        assert_eq!(index.total_entries(), 0);
        assert!(index.owners.is_empty());
        index.record(pod(2), &[1], 10);
        assert_eq!(index.pods.len(), 1, "pod 2 reuses pod 1's number");
        assert_eq!(index.matched_blocks(pod(1), &[1]), 0);
        assert_eq!(index.matched_blocks(pod(2), &[1, 2]), 1);
    }

    proptest! {
        #[test]
        fn memory_stays_within_each_pods_capacity(
            records in proptest::collection::vec(
                (0u16..6, proptest::collection::vec(0u64..500, 1..40), proptest::bool::weighted(0.05)),
                1..200,
            ),
            capacity in 1usize..64,
            max_owners in 1u32..4,
        ) {
            let mut index = PrefixIndex::new(max_owners);
            for (p, hashes, forget) in &records {
                if *forget {
                    index.forget(pod(*p));
                    prop_assert_eq!(index.blocks_of(pod(*p)), 0);
                } else {
                    // Every third prompt is matched where it lands before it is recorded.
                    let matched = index.matched_blocks(pod(*p), hashes);
                    if hashes.len() % 3 == 0 {
                        index.mark_reused(pod(*p), hashes, matched);
                    }
                    index.record(pod(*p), hashes, capacity);
                }
            }
            prop_assert!(index.pods.len() <= 6, "numbers of forgotten pods are reused");
            for p in 0..6 {
                prop_assert!(index.blocks_of(pod(p)) <= capacity);
            }
            for blocks in &index.pods {
                prop_assert!(blocks.order.len() <= 2 * blocks.held + COMPACT_SLACK);
            }
            for owners in index.owners.values() {
                prop_assert!(owners.len() <= max_owners as usize);
                prop_assert!(!owners.is_empty());
            }
            let from_owners: usize = index.owners.values().map(|o| o.len()).sum();
            prop_assert_eq!(from_owners, index.total_entries());
            for (id, blocks) in index.pods.iter().enumerate() {
                let owned = index.owners.values().filter(|o| owns(o, id as PodId)).count();
                prop_assert_eq!(owned, blocks.held);
                let reused = index.owners.values().flatten().filter(|o| o.pod == id as PodId && o.reused).count();
                prop_assert_eq!(reused, blocks.reused);
            }
        }
    }
}
