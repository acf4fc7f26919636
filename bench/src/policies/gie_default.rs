//! The llm-d Router's default scheduling profile, as of llm-d Router v0.10.0
//! (`pkg/epp/config/loader/defaults.go`): the queue, kv-cache-utilization and
//! prefix-cache scorers weighted 2, 2 and 3, then the max-score picker, and no filter.
//!
//! - **queue** (`scorer/queuedepth/queue.go`): `(max − q) / (max − min)` over the pods'
//!   scraped waiting queues, 1 for all when they are equal.
//! - **kv** (`scorer/kvcacheutilization/kvcache_utilization.go`): `1 − KV use`, scraped.
//! - **prefix** (`scorer/prefix/plugin.go`, fed by the approximate producer
//!   `requestcontrol/dataproducer/approximateprefix/{plugin,indexer,types}.go` and
//!   `dataproducer/prefixhash/hashing.go`): matched blocks / total blocks. The prompt is
//!   cut into blocks of `max(block_size metric, 64)` tokens (4 bytes per pseudo-token),
//!   a partial last block included, at most 131,072 tokens; the chain is salted with the
//!   model name. Walking the blocks in order until one no pod holds, each pod scores the
//!   blocks it holds. The index is the router's own past choices: right after scheduling
//!   the chosen pod is recorded as holding all the blocks, in a per-pod LRU whose size is
//!   the pod's `num_gpu_blocks` metric when the LRU is made (31,250 without it). The
//!   blocks are added to the LRU first to last, so a prompt's first block is its least
//!   recently used and goes first.
//! - **picker** (`picker/maxscore/picker.go`): each score clamped to [0, 1], weighted and
//!   summed; the highest total wins, ties at random (shuffle, then a stable sort).
//!
//! The profile's inputs are the Router's metrics scrape, every 50 ms
//! (`--refresh-metrics-interval`, `pkg/epp/server/options.go`): queue, KV, block size,
//! `num_gpu_blocks`; and the index.
//!
//! `gie_lora` is the same profile with the `lora-affinity-scorer`
//! (`scorer/loraaffinity/lora_affinity.go`) added at the loader's default weight, 1
//! (`config/loader/defaults.go`), as LoRA fleets configure it; it is upstream's only
//! LoRA plugin in v0.10.0, and no shipped config turns it on. Per pod, for the
//! request's target model (its adapter, else the base model): 1.0 if it is among the
//! running adapters (`vllm:lora_requests_info`), else 0.8 if running + waiting adapters
//! are fewer than `max_lora`, else 0.6 if it is waiting, else 0.

use infergate_core::endpoint::Endpoint;
use infergate_core::prefix::PrefixIndex;
use infergate_core::wire::CHARS_PER_TOKEN;
use xxhash_rust::xxh64::xxh64;

use infergate_core::snapshot::PodSignals;

use super::{PickContext, Policy, argmax, min_max_lower_better, scraped};

const QUEUE_WEIGHT: f64 = 2.0;
const KV_WEIGHT: f64 = 2.0;
const PREFIX_WEIGHT: f64 = 3.0;
const LORA_WEIGHT: f64 = 1.0;
/// The producer's floor on the block size, tokens.
const MIN_BLOCK_TOKENS: usize = 64;
/// `maxPrefixTokensToMatch`: 2,048 blocks of 64 tokens.
const MAX_PREFIX_TOKENS: usize = 131_072;
/// `lruCapacityPerServer`, used when the pod does not report `num_gpu_blocks`.
const DEFAULT_LRU_CAPACITY: u64 = 31_250;

pub struct GieDefault {
    index: PrefixIndex,
    rng: fastrand::Rng,
    endpoints: Vec<Endpoint>,
    /// Each pod's LRU size, fixed when its LRU is first made.
    lru_capacity: Vec<Option<u64>>,
    /// With the `lora-affinity-scorer` (`gie_lora`).
    lora_affinity: bool,
}

impl GieDefault {
    pub fn new(pods: usize, seed: u64) -> Self {
        Self {
            index: PrefixIndex::new(u32::MAX),
            rng: fastrand::Rng::with_seed(seed),
            endpoints: (0..pods).map(crate::fleet::pod_endpoint).collect(),
            lru_capacity: vec![None; pods],
            lora_affinity: false,
        }
    }

    /// The profile with the `lora-affinity-scorer` at weight 1: `gie_lora`.
    pub fn with_lora_affinity(pods: usize, seed: u64) -> Self {
        Self { lora_affinity: true, ..Self::new(pods, seed) }
    }

    /// Per pod, the blocks it holds among the leading blocks some pod holds.
    fn matched_blocks(&self, hashes: &[u64]) -> Vec<usize> {
        let mut matched = vec![0; self.endpoints.len()];
        for &hash in hashes {
            let mut held = false;
            for (count, &pod) in matched.iter_mut().zip(&self.endpoints) {
                if self.index.matched_keys(pod, &[hash]) == 1 {
                    *count += 1;
                    held = true;
                }
            }
            if !held {
                break;
            }
        }
        matched
    }
}

/// The prompt's block hash chain: blocks of `block_tokens` pseudo-tokens, the last one
/// possibly partial, at most `MAX_PREFIX_TOKENS / block_tokens` of them.
pub(super) fn block_hashes(prompt: &[u8], model: &str, block_tokens: usize) -> Vec<u64> {
    let block_tokens = block_tokens.max(1);
    let mut parent = xxh64(model.as_bytes(), 0);
    prompt
        .chunks(block_tokens * CHARS_PER_TOKEN)
        .take(MAX_PREFIX_TOKENS / block_tokens)
        .map(|block| {
            parent = xxh64(block, parent);
            parent
        })
        .collect()
}

/// The `lora-affinity-scorer`'s score of a pod for `target` (see the module doc).
fn lora_affinity(signals: &PodSignals, target: &str) -> f64 {
    let listed = |adapters: &[String]| adapters.iter().any(|a| a == target);
    let loaded = signals.running_adapters.len() + signals.waiting_adapters.len();
    if listed(&signals.running_adapters) {
        1.0
    } else if loaded < signals.max_loras.unwrap_or(0) as usize {
        0.8
    } else if listed(&signals.waiting_adapters) {
        0.6
    } else {
        0.0
    }
}

impl Policy for GieDefault {
    fn name(&self) -> &'static str {
        if self.lora_affinity { "gie_lora" } else { "gie_default" }
    }

    fn scrape_interval_s(&self) -> Option<f64> {
        Some(super::LLMD_SCRAPE_INTERVAL_S)
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        let n = ctx.engines.len().min(self.endpoints.len());
        if n == 0 {
            return 0;
        }
        let signals: Vec<_> = (0..n).map(|i| scraped(ctx.scrape, i)).collect();
        // The producer reads the block size off the first candidate.
        let block_tokens = signals.first().and_then(|s| s.block_size).map_or(0, |b| b as usize).max(MIN_BLOCK_TOKENS);
        let hashes = block_hashes(&ctx.request.prompt.bytes(), &ctx.request.model, block_tokens);
        let matched = self.matched_blocks(&hashes);
        let queue = min_max_lower_better(&signals.iter().map(|s| s.waiting.unwrap_or(0.0)).collect::<Vec<_>>());
        let target = ctx.request.adapter.as_deref().unwrap_or(&ctx.request.model);
        let totals: Vec<f64> = (0..n)
            .map(|i| {
                let kv = 1.0 - signals[i].kv_cache_usage.unwrap_or(0.0);
                let prefix = if hashes.is_empty() { 0.0 } else { matched[i] as f64 / hashes.len() as f64 };
                let lora = if self.lora_affinity { LORA_WEIGHT * lora_affinity(&signals[i], target) } else { 0.0 };
                QUEUE_WEIGHT * queue[i].clamp(0.0, 1.0)
                    + KV_WEIGHT * kv.clamp(0.0, 1.0)
                    + PREFIX_WEIGHT * prefix.clamp(0.0, 1.0)
                    + lora
            })
            .collect();
        let pod = argmax(&totals, &mut self.rng);
        let capacity = *self.lru_capacity[pod]
            .get_or_insert_with(|| signals[pod].num_gpu_blocks.filter(|b| *b > 0).unwrap_or(DEFAULT_LRU_CAPACITY));
        // The index takes a prompt's keys last to first (its start the most recent);
        // reversed, they go in as the LRU adds them, first to last.
        let added: Vec<u64> = hashes.iter().rev().copied().collect();
        self.index.record(self.endpoints[pod], &added, &[], capacity);
        pod
    }
}
