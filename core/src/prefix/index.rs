//! The per-worker prefix index: for each pod, the prefix keys it probably holds, in
//! least-recently-used order and bounded by the pod's KV capacity; for each key, at
//! most `max_owners` pods.
//!
//! A key stands for a prompt's first blocks (`hashing.rs`), and weighs the blocks
//! since the key before it (`anchors.rs` spaces keys ever more widely): a pod's
//! capacity and the room it has left are counted in blocks, whatever the spacing.
//!
//! Every routed request records its keys (a few hundred at most), so this is the
//! hottest structure of the filter. One map, from key to its owners with the time each
//! last used it, answers both "does this pod hold this prefix" and "who to evict"; keys
//! are already xxHash64 outputs, so the map uses them as their own hash. A prompt's
//! keys are recorded from its last to its first, so its start is the most recently
//! used and a pod forgets a prompt from its tail, as vLLM frees a request's blocks
//! tail first: what a pod holds of a prompt stays a prefix. The longest prefix a pod
//! holds is then found by a binary search over the keys, about ten probes for any
//! length. Each pod's LRU order is an append-only queue in which re-used or stolen
//! keys leave stale entries that eviction skips and compaction drops. Owners are pod
//! numbers, held inline when there is one (unshared keys are most keys).
//!
//! A key a later request matched on a pod is marked reused there: a prefix that
//! serves more than one request, as opposed to the tail of one prompt. Each pod counts
//! the blocks of its reused keys, so that the router can tell a cache full of prefixes
//! in use from one full of old tails, which evicting costs nothing.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;

use nohash_hasher::NoHashHasher;
use smallvec::SmallVec;

use crate::endpoint::Endpoint;

/// Maps keyed by prefix keys, which are uniformly distributed already.
type HashKeyed<V> = HashMap<u64, V, BuildHasherDefault<NoHashHasher<u64>>>;

/// Pods are numbered on first sight; a forgotten pod's number, which no key lists any
/// more, goes to the next new pod, so churn does not grow the index.
type PodId = u32;

/// One pod holding a key: when it last used it, whether a later request matched it
/// there, and the blocks it stands for beyond the key before it.
#[derive(Debug, Clone, Copy)]
struct Owner {
    pod: PodId,
    reused: bool,
    weight: u32,
    stamp: u64,
}

/// Who holds one key.
type Owners = SmallVec<[Owner; 1]>;

/// Candidates searched together (`matched_keys_each`), inline up to a pool of 16.
type Members = SmallVec<[usize; 16]>;

/// Stale queue entries allowed beyond one per live key before compacting.
const COMPACT_SLACK: usize = 1024;

#[derive(Debug, Default)]
struct PodBlocks {
    /// Blocks this pod's keys stand for.
    held: u64,
    /// Of them, blocks of keys a later request matched.
    reused: u64,
    /// Keys this pod owns now.
    keys: usize,
    /// (stamp, key), oldest first; an entry is live only while the key's owners list
    /// this pod with this stamp.
    order: VecDeque<(u64, u64)>,
}

fn owns(owners: &Owners, id: PodId) -> bool {
    owners.iter().any(|o| o.pod == id)
}

fn is_live(owners: &HashKeyed<Owners>, id: PodId, stamp: u64, key: u64) -> bool {
    owners.get(&key).is_some_and(|o| o.iter().any(|o| o.pod == id && o.stamp == stamp))
}

impl PodBlocks {
    fn gain(&mut self, weight: u32) {
        self.held += u64::from(weight);
        self.keys += 1;
    }

    /// `owner` no longer holds its key.
    fn lose(&mut self, owner: Owner) {
        self.held = self.held.saturating_sub(u64::from(owner.weight));
        self.keys = self.keys.saturating_sub(1);
        if owner.reused {
            self.reused = self.reused.saturating_sub(u64::from(owner.weight));
        }
    }
}

/// The blocks key `i` of a prompt stands for beyond key `i − 1`: the step between
/// their ends, or one block each when the ends are not given (a record of an older
/// build, whose keys were one per block).
fn weight(ends: &[u32], i: usize) -> u32 {
    match (ends.get(i), i.checked_sub(1).and_then(|p| ends.get(p))) {
        (Some(&end), Some(&before)) => end.saturating_sub(before).max(1),
        (Some(&end), None) => end.max(1),
        (None, _) => 1,
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

    /// How many of `keys`, from the first, `pod` holds: the last key it holds in a
    /// binary search, which assumes (as the tail-first eviction keeps true) that a pod
    /// holding a key holds the keys before it.
    pub fn matched_keys(&self, pod: Endpoint, keys: &[u64]) -> usize {
        let Some(&id) = self.ids.get(&pod) else { return 0 };
        let held = |i: usize| keys.get(i).and_then(|k| self.owners.get(k)).is_some_and(|o| owns(o, id));
        // Invariant: every key below `low` is taken as held, `high` and above as not.
        let (mut low, mut high) = (0, keys.len());
        while low < high {
            let middle = low + (high - low) / 2;
            if held(middle) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low
    }

    /// [`Self::matched_keys`] for each of `pods`, into `matched`, found together: a
    /// probe's owners answer for every pod still searching at that key, so a prompt no
    /// pod holds costs one binary search, not one per pod, and pods that hold the same
    /// prefix share their probes.
    pub fn matched_keys_each(&self, pods: &[Endpoint], keys: &[u64], matched: &mut Vec<usize>) {
        matched.clear();
        matched.resize(pods.len(), 0);
        // Each pod's number, looked up once; a pod the index never saw holds nothing.
        let ids: SmallVec<[Option<PodId>; 16]> = pods.iter().map(|p| self.ids.get(p).copied()).collect();
        let known: Members = (0..pods.len()).filter(|&i| ids.get(i).is_some_and(Option::is_some)).collect();
        let id = |member: usize| ids.get(member).copied().flatten();
        // Each group: the pods whose longest held key is known to lie in [low, high).
        let mut groups: SmallVec<[(usize, usize, Members); 8]> = SmallVec::new();
        groups.push((0, keys.len(), known));
        while let Some((low, high, members)) = groups.pop() {
            if low >= high {
                for member in members {
                    if let Some(slot) = matched.get_mut(member) {
                        *slot = low;
                    }
                }
                continue;
            }
            let middle = low + (high - low) / 2;
            let owners = keys.get(middle).and_then(|k| self.owners.get(k));
            let (held, not): (Members, Members) =
                members.into_iter().partition(|&m| owners.is_some_and(|o| id(m).is_some_and(|id| owns(o, id))));
            if !held.is_empty() {
                groups.push((middle + 1, high, held));
            }
            if !not.is_empty() {
                groups.push((low, middle, not));
            }
        }
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

    /// `pod` now holds the prompt whose keys are `keys`, each ending at `ends` (empty:
    /// one block per key), and at most `capacity_blocks` blocks in all.
    pub fn record(&mut self, pod: Endpoint, keys: &[u64], ends: &[u32], capacity_blocks: u64) {
        let id = self.id_of(pod);
        for (i, &key) in keys.iter().enumerate().rev() {
            self.clock += 1;
            let clock = self.clock;
            let owners = self.owners.entry(key).or_default();
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
                let weight = weight(ends, i);
                owners.push(Owner { pod: id, reused: false, weight, stamp: clock });
                if let Some(blocks) = self.pods.get_mut(id as usize) {
                    blocks.gain(weight);
                }
            }
            if let Some(blocks) = self.pods.get_mut(id as usize) {
                blocks.order.push_back((clock, key));
            }
        }
        self.compact(id);
        self.trim(id, capacity_blocks.max(1));
    }

    /// Drops stale queue entries once they outnumber the live ones.
    fn compact(&mut self, id: PodId) {
        let Some(blocks) = self.pods.get_mut(id as usize) else { return };
        if blocks.order.len() > 2 * blocks.keys + COMPACT_SLACK {
            let owners = &self.owners;
            blocks.order.retain(|&(stamp, key)| is_live(owners, id, stamp, key));
        }
    }

    /// Evicts `id`'s least recently used keys until its blocks are within `capacity`.
    fn trim(&mut self, id: PodId, capacity: u64) {
        let Some(blocks) = self.pods.get_mut(id as usize) else { return };
        while blocks.held > capacity {
            let Some((stamp, key)) = blocks.order.pop_front() else { break };
            // One lookup per evicted key: most keys have one owner, so the entry
            // usually goes with it.
            let Entry::Occupied(mut owners) = self.owners.entry(key) else { continue };
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
        for (_, key) in blocks.order.drain(..) {
            if let Some(owners) = self.owners.get_mut(&key) {
                owners.retain(|o| o.pod != id);
                if owners.is_empty() {
                    self.owners.remove(&key);
                }
            }
        }
        *blocks = PodBlocks::default();
        self.ids.remove(&pod);
        self.free.push(id);
    }

    /// A request routed to `pod` matched the first `matched` of `keys` there: those
    /// prefixes serve more than one request.
    pub fn mark_reused(&mut self, pod: Endpoint, keys: &[u64], matched: usize) {
        let Some(&id) = self.ids.get(&pod) else { return };
        let Some(blocks) = self.pods.get_mut(id as usize) else { return };
        for key in keys.iter().take(matched) {
            let owner = self.owners.get_mut(key).and_then(|o| o.iter_mut().find(|o| o.pod == id));
            if let Some(owner) = owner.filter(|o| !o.reused) {
                owner.reused = true;
                blocks.reused += u64::from(owner.weight);
            }
        }
    }

    /// Blocks `pod` holds.
    pub fn blocks_of(&self, pod: Endpoint) -> u64 {
        self.ids.get(&pod).and_then(|&id| self.pods.get(id as usize)).map_or(0, |b| b.held)
    }

    /// Blocks `pod` holds that a later request matched there.
    pub fn reused_blocks_of(&self, pod: Endpoint) -> u64 {
        self.ids.get(&pod).and_then(|&id| self.pods.get(id as usize)).map_or(0, |b| b.reused)
    }

    /// Keys held, over all pods.
    pub fn total_entries(&self) -> usize {
        self.pods.iter().map(|b| b.keys).sum()
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
    fn the_match_is_the_longest_held_prefix() {
        let mut index = PrefixIndex::new(4);
        index.record(pod(1), &[1, 2, 3], &[], 100);
        assert_eq!(index.matched_keys(pod(1), &[1, 2, 3, 4]), 3);
        assert_eq!(index.matched_keys(pod(1), &[1, 9, 3]), 1, "a key not held ends the match");
        assert_eq!(index.matched_keys(pod(2), &[1, 2]), 0);
        assert_eq!(index.matched_keys(pod(1), &[]), 0);
    }

    #[test]
    fn a_long_chain_is_matched_in_a_few_probes() {
        let mut index = PrefixIndex::new(4);
        let chain: Vec<u64> = (1..=704).collect();
        index.record(pod(1), &chain, &[], 1_000_000);
        let longer: Vec<u64> = (1..=1_000).collect();
        assert_eq!(index.matched_keys(pod(1), &longer), 704);
        let diverging: Vec<u64> = (1..=300).chain(5_000..6_000).collect();
        assert_eq!(index.matched_keys(pod(1), &diverging), 300);
    }

    #[test]
    fn pods_searched_together_match_as_each_alone() {
        let mut index = PrefixIndex::new(8);
        let chain: Vec<u64> = (1..=500).collect();
        index.record(pod(1), &chain[..300], &[], 1_000_000);
        index.record(pod(2), &chain[..17], &[], 1_000_000);
        index.record(pod(3), &chain, &[], 1_000_000);
        index.record(pod(4), &[9_999], &[], 1_000_000);
        let pods: Vec<Endpoint> = (1..=5).map(pod).collect();
        let mut matched = Vec::new();
        index.matched_keys_each(&pods, &chain, &mut matched);
        assert_eq!(matched, [300, 17, 500, 0, 0]);
        let alone: Vec<usize> = pods.iter().map(|&p| index.matched_keys(p, &chain)).collect();
        assert_eq!(matched, alone);
        index.matched_keys_each(&pods, &[], &mut matched);
        assert_eq!(matched, [0; 5]);
    }

    #[test]
    fn a_pod_forgets_the_tail_of_its_oldest_prompt_first() {
        let mut index = PrefixIndex::new(4);
        index.record(pod(1), &[1, 2], &[], 3);
        index.record(pod(1), &[3, 4], &[], 3);
        assert_eq!(index.blocks_of(pod(1)), 3);
        assert_eq!(index.matched_keys(pod(1), &[1, 2]), 1, "key 2, the oldest prompt's tail, went first");
        assert_eq!(index.matched_keys(pod(1), &[3, 4]), 2);
    }

    #[test]
    fn keys_weigh_the_blocks_they_stand_for() {
        let mut index = PrefixIndex::new(4);
        index.record(pod(1), &[1, 2, 3], &[2, 6, 10], 100);
        assert_eq!((index.blocks_of(pod(1)), index.total_entries()), (10, 3));
        index.record(pod(1), &[7], &[], 8);
        assert_eq!(index.blocks_of(pod(1)), 7, "the tail key, 4 blocks, made room for one");
        assert_eq!(index.matched_keys(pod(1), &[1, 2, 3]), 2);
        index.mark_reused(pod(1), &[1, 2, 3], 2);
        assert_eq!(index.reused_blocks_of(pod(1)), 6);
    }

    #[test]
    fn a_block_has_at_most_max_owners() {
        let mut index = PrefixIndex::new(2);
        for p in 1..=3 {
            index.record(pod(p), &[42], &[], 10);
        }
        let holders = (1..=3).filter(|&p| index.matched_keys(pod(p), &[42]) == 1).count();
        assert_eq!(holders, 2);
        assert_eq!(index.matched_keys(pod(1), &[42]), 0, "the least recent owner was replaced");
    }

    #[test]
    fn a_prefix_used_again_outlives_the_tails() {
        let mut index = PrefixIndex::new(4);
        index.record(pod(1), &[1, 2, 3], &[], 3);
        index.record(pod(1), &[1], &[], 3);
        index.record(pod(1), &[4], &[], 3);
        assert_eq!(index.matched_keys(pod(1), &[1, 2]), 2, "the prefix stays");
        assert_eq!(index.matched_keys(pod(1), &[1, 2, 3]), 2, "key 3, the tail, was the least recent");
    }

    #[test]
    fn repeated_hits_do_not_grow_the_eviction_queue_without_bound() {
        let mut index = PrefixIndex::new(4);
        for _ in 0..10_000 {
            index.record(pod(1), &[1, 2, 3, 4], &[], 100);
        }
        let blocks = &index.pods[0];
        assert_eq!(blocks.keys, 4);
        assert!(blocks.order.len() <= 2 * blocks.keys + COMPACT_SLACK, "{}", blocks.order.len());
    }

    #[test]
    fn blocks_a_later_request_matched_count_as_reused_until_evicted() {
        let mut index = PrefixIndex::new(4);
        index.record(pod(1), &[1, 2, 3], &[], 3);
        assert_eq!(index.reused_blocks_of(pod(1)), 0, "one prompt's blocks");
        index.mark_reused(pod(1), &[1, 2, 9], 2);
        index.mark_reused(pod(1), &[1, 2, 9], 2);
        index.mark_reused(pod(2), &[1, 2, 9], 2);
        assert_eq!((index.reused_blocks_of(pod(1)), index.reused_blocks_of(pod(2))), (2, 0));
        // Two new blocks evict the least recently used: 3 was used again, so 2, then 1.
        index.record(pod(1), &[3, 7, 8], &[], 3);
        assert_eq!(index.reused_blocks_of(pod(1)), 0);
    }

    #[test]
    fn forgetting_a_pod_removes_its_blocks() {
        let mut index = PrefixIndex::new(4);
        index.record(pod(1), &[1, 2], &[], 10);
        index.forget(pod(1));
        assert_eq!(index.total_entries(), 0);
        assert!(index.owners.is_empty());
        index.record(pod(2), &[1], &[], 10);
        assert_eq!(index.pods.len(), 1, "pod 2 reuses pod 1's number");
        assert_eq!(index.matched_keys(pod(1), &[1]), 0);
        assert_eq!(index.matched_keys(pod(2), &[1, 2]), 1);
    }

    proptest! {
        #[test]
        fn memory_stays_within_each_pods_capacity(
            records in proptest::collection::vec(
                (0u16..6, proptest::collection::vec(0u64..500, 1..40), 1u32..5, proptest::bool::weighted(0.05)),
                1..200,
            ),
            capacity in 1u64..64,
            max_owners in 1u32..4,
        ) {
            let mut index = PrefixIndex::new(max_owners);
            for (p, keys, spacing, forget) in &records {
                let ends: Vec<u32> = (1..=keys.len() as u32).map(|i| i * spacing).collect();
                if *forget {
                    index.forget(pod(*p));
                    prop_assert_eq!(index.blocks_of(pod(*p)), 0);
                } else {
                    // Every third prompt is matched where it lands before it is recorded.
                    let matched = index.matched_keys(pod(*p), keys);
                    prop_assert!(matched <= keys.len());
                    let pods: Vec<Endpoint> = (0..6).map(pod).collect();
                    let mut each = Vec::new();
                    index.matched_keys_each(&pods, keys, &mut each);
                    let alone: Vec<usize> = pods.iter().map(|&p| index.matched_keys(p, keys)).collect();
                    prop_assert_eq!(each, alone);
                    if keys.len() % 3 == 0 {
                        index.mark_reused(pod(*p), keys, matched);
                    }
                    index.record(pod(*p), keys, &ends, capacity);
                }
            }
            prop_assert!(index.pods.len() <= 6, "numbers of forgotten pods are reused");
            for p in 0..6 {
                prop_assert!(index.blocks_of(pod(p)) <= capacity);
            }
            for blocks in &index.pods {
                prop_assert!(blocks.order.len() <= 2 * blocks.keys + COMPACT_SLACK);
            }
            for owners in index.owners.values() {
                prop_assert!(owners.len() <= max_owners as usize);
                prop_assert!(!owners.is_empty());
            }
            let from_owners: usize = index.owners.values().map(|o| o.len()).sum();
            prop_assert_eq!(from_owners, index.total_entries());
            for (id, blocks) in index.pods.iter().enumerate() {
                let mine = || index.owners.values().flatten().filter(|o| o.pod == id as PodId);
                prop_assert_eq!(mine().count(), blocks.keys);
                prop_assert_eq!(mine().map(|o| u64::from(o.weight)).sum::<u64>(), blocks.held);
                let reused: u64 = mine().filter(|o| o.reused).map(|o| u64::from(o.weight)).sum();
                prop_assert_eq!(reused, blocks.reused);
            }
        }
    }
}
