//! Engine calibration: how fast a pod prefills and decodes, and how much KV cache and
//! how many LoRA slots it has.

use serde::{Deserialize, Serialize};

/// One pod's performance model. Every field can be overridden from the command line.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineProfile {
    /// Largest running batch (vLLM `--max-num-seqs`).
    pub max_num_seqs: u32,
    /// Tokens one step may process, prefill chunks and decodes together (vLLM
    /// `--max-num-batched-tokens`, chunked prefill).
    pub max_num_batched_tokens: u32,
    /// Prefill throughput, uncached prompt tokens per second.
    pub prefill_tokens_per_s: f64,
    /// Decode step time with a batch of one, milliseconds.
    pub itl_base_ms: f64,
    /// Added step time per sequence in the batch, milliseconds.
    pub itl_per_seq_ms: f64,
    /// KV-cache blocks (vLLM `num_gpu_blocks`).
    pub num_gpu_blocks: u64,
    /// Tokens per KV block.
    pub block_size: u32,
    /// Resident LoRA adapters at most (vLLM `--max-loras`).
    pub max_loras: u32,
    /// Time to load an adapter that is not resident, milliseconds.
    pub lora_load_ms: f64,
}

/// The named calibrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum NamedProfile {
    /// Llama-3.1-8B-Instruct, BF16, one H100 SXM 80 GB (see docs/model-sim.md).
    #[default]
    Llama31_8bH100,
    /// A small, fast profile for tests: millisecond steps, little KV cache.
    Tiny,
}

impl NamedProfile {
    pub fn profile(self) -> EngineProfile {
        match self {
            NamedProfile::Llama31_8bH100 => EngineProfile::LLAMA_3_1_8B_H100,
            NamedProfile::Tiny => EngineProfile::TINY,
        }
    }
}

impl EngineProfile {
    /// Derived in docs/model-sim.md from the H100's 3.35 TB/s HBM and 989 TFLOPS (BF16
    /// dense) and Llama-3.1-8B's shape (32 layers, 8 KV heads of 128: 128 KiB of KV per
    /// token). Decode is memory-bound: 16 GB of weights per step ≈ 5 ms, plus overhead.
    pub const LLAMA_3_1_8B_H100: EngineProfile = EngineProfile {
        max_num_seqs: 256,
        max_num_batched_tokens: 8192,
        prefill_tokens_per_s: 20_000.0,
        itl_base_ms: 7.0,
        itl_per_seq_ms: 0.06,
        num_gpu_blocks: 27_000,
        block_size: 16,
        max_loras: 4,
        lora_load_ms: 25.0,
    };

    pub const TINY: EngineProfile = EngineProfile {
        max_num_seqs: 8,
        max_num_batched_tokens: 2048,
        prefill_tokens_per_s: 50_000.0,
        itl_base_ms: 2.0,
        itl_per_seq_ms: 0.1,
        num_gpu_blocks: 512,
        block_size: 16,
        max_loras: 2,
        lora_load_ms: 10.0,
    };

    pub fn kv_capacity_tokens(&self) -> u64 {
        self.num_gpu_blocks * u64::from(self.block_size)
    }

    /// One step's duration in seconds: the decode cost of the batch plus the prefill of
    /// the prompt tokens processed in it.
    pub fn step_seconds(&self, batch: usize, prefill_tokens: u64) -> f64 {
        let decode_ms = self.itl_base_ms + self.itl_per_seq_ms * batch as f64;
        decode_ms / 1000.0 + prefill_tokens as f64 / self.prefill_tokens_per_s
    }
}

impl Default for EngineProfile {
    fn default() -> Self {
        Self::LLAMA_3_1_8B_H100
    }
}
