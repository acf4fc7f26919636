//! The KV cache as vLLM's block manager sees it: a fixed number of blocks; full prompt
//! blocks are identified by a hash chain over their tokens and stay cached after their
//! request ends, until evicted least-recently-used when room is needed.

use std::collections::{BTreeSet, HashMap};

#[derive(Debug, Clone, Copy)]
struct CachedBlock {
    refs: u32,
    last_used: u64,
}

/// What a request holds in the cache until it finishes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocation {
    /// Hashes of the prompt blocks it references (cached or newly computed).
    pub hashed: Vec<u64>,
    /// Blocks for the uncacheable tail of the prompt and for the output.
    pub private: u64,
    /// Prompt blocks found in the cache.
    pub hit_blocks: u64,
}

#[derive(Debug, Clone)]
pub struct KvCache {
    capacity: u64,
    blocks: HashMap<u64, CachedBlock>,
    /// Cached blocks that no request references, oldest first: the eviction order.
    evictable: BTreeSet<(u64, u64)>,
    referenced: u64,
    private: u64,
    clock: u64,
    /// The hashes evicted since the last [`KvCache::take_evicted`], when recorded.
    evicted: Option<Vec<u64>>,
}

impl KvCache {
    pub fn new(capacity_blocks: u64) -> Self {
        Self {
            capacity: capacity_blocks,
            blocks: HashMap::new(),
            evictable: BTreeSet::new(),
            referenced: 0,
            private: 0,
            clock: 0,
            evicted: None,
        }
    }

    /// From now on, keeps the hashes of evicted blocks for [`KvCache::take_evicted`]
    /// (what a KV event publisher needs).
    pub fn record_evictions(&mut self) {
        self.evicted.get_or_insert_with(Vec::new);
    }

    /// The hashes evicted since the last call, oldest first; empty when not recorded.
    pub fn take_evicted(&mut self) -> Vec<u64> {
        self.evicted.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// How many leading blocks of `hashes` are cached now.
    pub fn cached_prefix(&self, hashes: &[u64]) -> usize {
        hashes.iter().take_while(|h| self.blocks.contains_key(h)).count()
    }

    /// Blocks in use by running requests, over capacity: vLLM's `kv_cache_usage_perc`.
    pub fn usage(&self) -> f64 {
        (self.referenced + self.private) as f64 / self.capacity.max(1) as f64
    }

    pub fn free_blocks(&self) -> u64 {
        self.capacity.saturating_sub(self.referenced + self.private)
    }

    /// Reserves the prompt's blocks (sharing cached ones) and `private` more; `None`
    /// when they do not fit even after evicting every unreferenced cached block.
    pub fn allocate(&mut self, hashes: &[u64], private: u64) -> Option<Allocation> {
        let hits = self.cached_prefix(hashes);
        let new_hashed = hashes.len().saturating_sub(hits) as u64;
        // Hits that are evictable stop being evictable once referenced.
        let hit_evictable =
            hashes.iter().take(hits).filter(|h| self.blocks.get(h).is_some_and(|b| b.refs == 0)).count() as u64;
        if new_hashed + private + hit_evictable > self.free_blocks() {
            return None;
        }
        self.clock += 1;
        for &hash in hashes {
            let clock = self.clock;
            let block = self.blocks.entry(hash).or_insert(CachedBlock { refs: 0, last_used: clock });
            if block.refs == 0 {
                self.evictable.remove(&(block.last_used, hash));
                self.referenced += 1;
            }
            block.refs += 1;
            block.last_used = clock;
        }
        self.private += private;
        self.evict_overflow();
        Some(Allocation { hashed: hashes.to_vec(), private, hit_blocks: hits as u64 })
    }

    /// Returns a finished request's blocks; its prompt blocks stay cached. They are
    /// freed tail first, as vLLM's `free` does (`single_type_kv_cache_manager.py`): a
    /// prompt loses its last blocks first, so what stays cached of it is a prefix.
    pub fn release(&mut self, allocation: &Allocation) {
        for hash in allocation.hashed.iter().rev() {
            if let Some(block) = self.blocks.get_mut(hash) {
                block.refs = block.refs.saturating_sub(1);
                if block.refs == 0 {
                    self.clock += 1;
                    self.referenced = self.referenced.saturating_sub(1);
                    block.last_used = self.clock;
                    self.evictable.insert((self.clock, *hash));
                }
            }
        }
        self.private = self.private.saturating_sub(allocation.private);
        self.evict_overflow();
    }

    /// Keeps cached + used blocks within capacity by evicting the least recently used.
    fn evict_overflow(&mut self) {
        while self.blocks.len() as u64 + self.private > self.capacity {
            let Some(oldest) = self.evictable.pop_first() else {
                break;
            };
            self.blocks.remove(&oldest.1);
            if let Some(evicted) = &mut self.evicted {
                evicted.push(oldest.1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evictions_are_recorded_only_when_asked() {
        let mut kv = KvCache::new(3);
        let a = kv.allocate(&[1, 2, 3], 0).unwrap();
        kv.release(&a);
        let b = kv.allocate(&[7, 8], 0).unwrap();
        assert!(kv.take_evicted().is_empty(), "not recorded");
        kv.release(&b);
        kv.record_evictions();
        let c = kv.allocate(&[4, 5, 6], 0).unwrap();
        assert_eq!(kv.cached_prefix(&[4, 5, 6]), 3);
        let evicted = kv.take_evicted();
        assert_eq!(evicted.len(), 3, "{evicted:?}");
        assert!(kv.take_evicted().is_empty(), "taken once");
        kv.release(&c);
    }

    #[test]
    fn freed_prompt_blocks_stay_cached_and_are_hit_again() {
        let mut kv = KvCache::new(10);
        let a = kv.allocate(&[1, 2, 3], 1).unwrap();
        assert_eq!(a.hit_blocks, 0);
        kv.release(&a);
        assert_eq!(kv.usage(), 0.0);
        let b = kv.allocate(&[1, 2, 9], 0).unwrap();
        assert_eq!(b.hit_blocks, 2);
    }

    #[test]
    fn a_full_cache_refuses_and_evicts_least_recently_used() {
        let mut kv = KvCache::new(4);
        let a = kv.allocate(&[1, 2], 0).unwrap();
        let b = kv.allocate(&[3, 4], 0).unwrap();
        assert!(kv.allocate(&[5], 0).is_none(), "all blocks are referenced");
        kv.release(&a);
        kv.release(&b);
        let c = kv.allocate(&[5, 6], 0).unwrap();
        assert_eq!(c.hit_blocks, 0);
        assert_eq!(kv.cached_prefix(&[1, 2]), 0, "the oldest blocks were evicted");
        assert_eq!(kv.cached_prefix(&[3, 4]), 2);
    }

    #[test]
    fn a_prompt_is_evicted_from_its_tail() {
        let mut kv = KvCache::new(6);
        // Hashes in ascending order: evicted by hash, a prompt would lose its head first.
        let a = kv.allocate(&[10, 20, 30, 40], 0).unwrap();
        kv.release(&a);
        let b = kv.allocate(&[91, 92, 93], 0).unwrap();
        assert_eq!(kv.cached_prefix(&[10, 20, 30, 40]), 3, "the tail block went first");
        kv.release(&b);
        let c = kv.allocate(&[94, 95, 96, 97], 0).unwrap();
        assert_eq!(c.hit_blocks, 0);
        assert_eq!(kv.cached_prefix(&[10, 20, 30, 40]), 0, "older than b's blocks");
        assert_eq!(kv.cached_prefix(&[91, 92, 93]), 2, "b keeps its head, not its tail");
    }

    #[test]
    fn usage_counts_referenced_and_private_blocks() {
        let mut kv = KvCache::new(10);
        let a = kv.allocate(&[1, 2], 3).unwrap();
        assert!((kv.usage() - 0.5).abs() < 1e-9);
        kv.release(&a);
        assert_eq!(kv.free_blocks(), 10);
    }
}
