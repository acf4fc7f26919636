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
    /// Attention time of prefill per (query, key) pair, nanoseconds: a chunk of a
    /// prompt's positions `[a, b)` attends to every earlier position, cached or not, so
    /// it adds `(b² − a²) / 2` pairs. 0: prefill time is linear in the tokens.
    #[serde(default)]
    pub attention_ns_per_pair: f64,
    /// Decode time per token of context each running request reads from the KV cache
    /// every step, nanoseconds (KV bytes per token over HBM bandwidth). 0: a step's
    /// time does not grow with context.
    #[serde(default)]
    pub kv_read_ns_per_token: f64,
}

/// The named calibrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum NamedProfile {
    /// Llama-3.1-8B-Instruct, BF16, one H100 SXM 80 GB (see docs/model-sim.md).
    #[default]
    Llama31_8bH100,
    /// The same with prefill attention and KV reads that grow with context, for prompts
    /// of 8k tokens and more (see docs/model-sim.md).
    Llama31_8bH100Long,
    /// The long-context model with an FP8 KV cache: twice the tokens of KV.
    Llama31_8bH100Fp8Kv,
    /// A small, fast profile for tests: millisecond steps, little KV cache.
    Tiny,
}

impl NamedProfile {
    pub fn profile(self) -> EngineProfile {
        match self {
            NamedProfile::Llama31_8bH100 => EngineProfile::LLAMA_3_1_8B_H100,
            NamedProfile::Llama31_8bH100Long => EngineProfile::LLAMA_3_1_8B_H100_LONG,
            NamedProfile::Llama31_8bH100Fp8Kv => EngineProfile::LLAMA_3_1_8B_H100_FP8_KV,
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
        attention_ns_per_pair: 0.0,
        kv_read_ns_per_token: 0.0,
    };

    /// Llama-3.1-8B on one H100 at long context, from the architecture's FLOP count and
    /// published kernel throughput (docs/model-sim.md, "Long context"): 13.96 GFLOP of
    /// matrix work per token at 56% of the H100's 989 TFLOPS (40,000 tokens/s; a
    /// measured 4k-token TTFT of 138–142 ms with serving overhead bounds it), and
    /// 524,288 FLOP of attention per (query, key) pair at FlashAttention-3's 500 TFLOPS
    /// (1.05 ns). A 128k-token prompt takes 12.3 s, three quarters of it attention.
    /// Each decode step reads every running request's KV: 128 KiB per token at
    /// 3.35 TB/s. KV cache: (0.9 × 80 − 16) GB / 128 KiB = 26,674 blocks of 16 tokens.
    pub const LLAMA_3_1_8B_H100_LONG: EngineProfile = EngineProfile {
        prefill_tokens_per_s: 40_000.0,
        num_gpu_blocks: 26_674,
        attention_ns_per_pair: 1.05,
        kv_read_ns_per_token: 39.1,
        ..Self::LLAMA_3_1_8B_H100
    };

    /// The long-context model with vLLM's `--kv-cache-dtype fp8`: 64 KiB of KV per
    /// token, so twice the blocks (853,568 tokens) and half the bytes read per step.
    pub const LLAMA_3_1_8B_H100_FP8_KV: EngineProfile =
        EngineProfile { num_gpu_blocks: 53_348, kv_read_ns_per_token: 19.6, ..Self::LLAMA_3_1_8B_H100_LONG };

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
        attention_ns_per_pair: 0.0,
        kv_read_ns_per_token: 0.0,
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

    /// The attention time of prefilling positions `[from, to)` of a prompt, seconds.
    pub fn attention_seconds(&self, from: u64, to: u64) -> f64 {
        let (from, to) = (from as f64, to.max(from) as f64);
        self.attention_ns_per_pair * 1e-9 * (to * to - from * from) / 2.0
    }

    /// The time a decode step spends reading `context_tokens` of KV, seconds.
    pub fn kv_read_seconds(&self, context_tokens: u64) -> f64 {
        self.kv_read_ns_per_token * 1e-9 * context_tokens as f64
    }

    /// The compute time of prefilling a whole prompt of `tokens` of which the first
    /// `cached` are cached, alone on the pod, seconds.
    pub fn prefill_seconds(&self, tokens: u64, cached: u64) -> f64 {
        tokens.saturating_sub(cached) as f64 / self.prefill_tokens_per_s + self.attention_seconds(cached, tokens)
    }
}

impl Default for EngineProfile {
    fn default() -> Self {
        Self::LLAMA_3_1_8B_H100
    }
}
