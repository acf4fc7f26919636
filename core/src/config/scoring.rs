//! How pods are ranked: the cost model, the profiles, the weights, and the limits on
//! each signal's age.

use serde::{Deserialize, Serialize};

#[cfg(feature = "schema")]
use super::limits;

use super::admission::AdmissionSettings;

/// How the router combines the signals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ScoringMode {
    /// Rank by predicted time to first token, in milliseconds: queue wait, uncached
    /// prefill at the pod's learned rate, adapter load.
    #[default]
    PredictedTtft,
    /// Rank by a weighted sum of scores in [0, 1], as the Gateway API Inference
    /// Extension does; kept for comparison.
    Weighted,
}

/// Whose learned speeds (prefill rate, decode step) price a pod.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum LearnedSpeeds {
    /// The median of the pool's pods, for every pod: a pool's pods run one model on
    /// one kind of hardware, and what sets their learned speeds apart is noise (what
    /// each happened to prefill, alone or beside others) that would otherwise steer
    /// new work to whichever pod looks fastest.
    #[default]
    Pool,
    /// Each pod's own: for a pool that mixes hardware.
    Pod,
}

/// What a pool optimizes for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// Interactive chat: the lowest time to first token.
    #[default]
    Latency,
    /// Batch jobs: the lowest time to the last token, so decode speed counts too.
    Throughput,
}

impl Profile {
    /// The weights of the weighted mode for this profile.
    pub fn weights(self) -> Weights {
        match self {
            Profile::Latency => Weights {
                kv_cache: 1.0,
                queue_depth: 2.0,
                running_requests: 1.0,
                lora_affinity: 2.0,
                prefix_cache: 3.0,
            },
            Profile::Throughput => Weights {
                kv_cache: 2.0,
                queue_depth: 1.0,
                running_requests: 2.0,
                lora_affinity: 1.0,
                prefix_cache: 3.0,
            },
        }
    }
}

/// How much each scorer counts in the weighted mode (`routing.scoring: weighted`).
/// Zero disables a scorer, and so does leaving it out once `weights` is written. The
/// presets: `latency` is kv_cache 1, queue_depth 2, running_requests 1, lora_affinity 2,
/// prefix_cache 3; `throughput` is 2, 1, 2, 1, 3.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::WEIGHTS)))]
#[serde(deny_unknown_fields)]
pub struct Weights {
    /// Free KV-cache room: less used scores higher.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(example = 1.0))]
    pub kv_cache: f64,
    /// Requests waiting at the engine: fewer scores higher.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(example = 2.0))]
    pub queue_depth: f64,
    /// Requests running at the engine: fewer scores higher.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(example = 1.0))]
    pub running_requests: f64,
    /// The request's LoRA adapter already loaded on the pod.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(example = 2.0))]
    pub lora_affinity: f64,
    /// The share of the prompt the pod likely holds in its prefix cache.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(example = 3.0))]
    pub prefix_cache: f64,
}

impl Weights {
    pub fn named(&self) -> [(&'static str, f64); 5] {
        [
            ("kv_cache", self.kv_cache),
            ("queue_depth", self.queue_depth),
            ("running_requests", self.running_requests),
            ("lora_affinity", self.lora_affinity),
            ("prefix_cache", self.prefix_cache),
        ]
    }
}

impl Default for Weights {
    fn default() -> Self {
        Profile::Latency.weights()
    }
}

/// Prefix-affinity hashing and index bounds. A prompt is hashed whole, up to
/// `block_chars × max_blocks` bytes (64 MiB by default: past any body limit), into a
/// few hundred keys (`prefix::anchors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::PREFIX)))]
#[serde(deny_unknown_fields)]
pub struct PrefixSettings {
    /// Characters per hashed block (16 tokens of 4 characters by default).
    #[serde(default = "PrefixSettings::default_block_chars")]
    pub block_chars: u32,
    /// Blocks hashed per prompt at most; the rest of a longer prompt is ignored. The
    /// default reaches past the 8 MiB body limit: every prompt is matched whole.
    #[serde(default = "PrefixSettings::default_max_blocks")]
    pub max_blocks: u32,
    /// Pods the index remembers as holding one block; a popular prefix is replicated
    /// on up to this many pods instead of pinning its traffic to one.
    #[serde(default = "PrefixSettings::default_max_owners")]
    pub max_owners: u32,
    /// Blocks remembered per pod when its KV capacity is not known yet.
    #[serde(default = "PrefixSettings::default_blocks_per_pod")]
    pub default_blocks_per_pod: u32,
}

impl PrefixSettings {
    /// The most prompt bytes hashing reads: what a request scanner needs to keep.
    pub fn hashed_bytes(&self) -> usize {
        (self.block_chars as usize).saturating_mul(self.max_blocks as usize)
    }

    fn default_block_chars() -> u32 {
        64
    }
    fn default_max_blocks() -> u32 {
        1 << 20
    }
    fn default_max_owners() -> u32 {
        4
    }
    fn default_blocks_per_pod() -> u32 {
        16_384
    }
}

impl Default for PrefixSettings {
    fn default() -> Self {
        Self {
            block_chars: Self::default_block_chars(),
            max_blocks: Self::default_max_blocks(),
            max_owners: Self::default_max_owners(),
            default_blocks_per_pod: Self::default_blocks_per_pod(),
        }
    }
}

/// What the predicted-TTFT model assumes until a pod's own counters teach it better.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::COST)))]
#[serde(deny_unknown_fields)]
pub struct CostDefaults {
    /// Prompt tokens a pod prefills per second, until its counters give its own rate.
    #[serde(default = "CostDefaults::default_prefill_tokens_per_s")]
    pub prefill_tokens_per_s: f64,
    /// Milliseconds per decode step (one output token of every running request), until
    /// the pod's counters give its own.
    #[serde(default = "CostDefaults::default_decode_step_ms")]
    pub decode_step_ms: f64,
    /// Uncached prompt tokens of an average queued request.
    #[serde(default = "CostDefaults::default_mean_prompt_tokens")]
    pub mean_prompt_tokens: f64,
    /// Time to load a LoRA adapter that the pod does not hold.
    #[serde(default = "CostDefaults::default_lora_load_ms")]
    pub lora_load_ms: f64,
    /// Added to a pod that has not reported metrics yet: usable, but not preferred.
    #[serde(default = "CostDefaults::default_unknown_pod_penalty_ms")]
    pub unknown_pod_penalty_ms: f64,
    /// Output tokens assumed when a request sets no `max_tokens` (throughput profile),
    /// and of the running requests whose end frees KV room.
    #[serde(default = "CostDefaults::default_output_tokens")]
    pub output_tokens: f64,
    /// The prompt length, in tokens, at which a prefill's attention costs as much as its
    /// matrix work: each token attends to every one before it, so a prefill of the
    /// tokens past a cached prefix `c` of a prompt of `L` costs `(L − c) × (1 + (L + c)
    /// / this)` tokens at the learned rate. About 50,000 for 7–8B models (53,000 by
    /// their FLOP count: 13.96 GFLOP of matrix work per token against 524,288 FLOP per
    /// token pair for Llama-3.1-8B), twice that for 70B ones; 0 prices prefill
    /// linearly.
    #[serde(default = "CostDefaults::default_attention_crossover_tokens")]
    pub attention_crossover_tokens: f64,
}

impl CostDefaults {
    fn default_prefill_tokens_per_s() -> f64 {
        10_000.0
    }
    fn default_decode_step_ms() -> f64 {
        20.0
    }
    fn default_mean_prompt_tokens() -> f64 {
        512.0
    }
    fn default_lora_load_ms() -> f64 {
        50.0
    }
    fn default_unknown_pod_penalty_ms() -> f64 {
        50.0
    }
    fn default_output_tokens() -> f64 {
        256.0
    }
    fn default_attention_crossover_tokens() -> f64 {
        50_000.0
    }

    /// The prefill work of a prompt of `prompt_tokens` past a cached prefix of
    /// `cached_tokens`, in tokens at the pod's linear rate
    /// ([`crate::scoring::prefill_work_tokens`]).
    pub fn prefill_work_tokens(&self, prompt_tokens: f64, cached_tokens: f64) -> f64 {
        crate::scoring::prefill_work_tokens(prompt_tokens, cached_tokens, self.attention_crossover_tokens)
    }
}

impl Default for CostDefaults {
    fn default() -> Self {
        Self {
            prefill_tokens_per_s: Self::default_prefill_tokens_per_s(),
            decode_step_ms: Self::default_decode_step_ms(),
            mean_prompt_tokens: Self::default_mean_prompt_tokens(),
            lora_load_ms: Self::default_lora_load_ms(),
            unknown_pod_penalty_ms: Self::default_unknown_pod_penalty_ms(),
            output_tokens: Self::default_output_tokens(),
            attention_crossover_tokens: Self::default_attention_crossover_tokens(),
        }
    }
}

/// How the filter ranks a pool's pods: read by the filter, at start and again from
/// every snapshot, so a change applies without an Envoy reload.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::ROUTING)))]
#[serde(deny_unknown_fields)]
pub struct RoutingSettings {
    /// How the router combines the signals into one rank.
    #[serde(default)]
    pub scoring: ScoringMode,
    /// What pools optimize for, unless a pool sets its own.
    #[serde(default)]
    pub profile: Profile,
    /// Explicit weights for the weighted mode; unset, each pool takes its profile's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Weights>,
    /// Queue, running and KV signals older than this are ignored: the pod is ranked on
    /// the gateway's own in-flight count instead.
    #[serde(default = "RoutingSettings::default_signal_max_age_ms")]
    pub signal_max_age_ms: u64,
    /// Adapter lists change slowly, so they stay usable longer.
    #[serde(default = "RoutingSettings::default_adapter_max_age_ms")]
    pub adapter_max_age_ms: u64,
    /// Weighted mode: pods whose KV-cache use is above this are skipped, unless all
    /// are. The predicted-TTFT mode prices a full cache as the wait for room instead.
    #[serde(default = "RoutingSettings::default_kv_cache_threshold")]
    pub kv_cache_threshold: f64,
    /// How many ranked endpoints go in `x-gateway-destination-endpoint` (first is the
    /// choice, the rest are retry targets in order).
    #[serde(default = "RoutingSettings::default_ranked_endpoints")]
    pub ranked_endpoints: usize,
    /// `Retry-After`, in seconds, on a 503 when a pool has no ready pod.
    #[serde(default = "RoutingSettings::default_retry_after_s")]
    pub retry_after_s: u32,
    /// Prefix-affinity hashing: which pods likely hold a prompt's prefix in cache.
    #[serde(default)]
    pub prefix: PrefixSettings,
    /// The predicted-TTFT model's starting assumptions.
    #[serde(default)]
    pub cost: CostDefaults,
    /// Whose learned speeds price a pod: `pool` (the default) or `pod`.
    #[serde(default)]
    pub speeds: LearnedSpeeds,
    /// When a saturated pool refuses sheddable requests.
    #[serde(default)]
    pub admission: AdmissionSettings,
}

impl RoutingSettings {
    fn default_signal_max_age_ms() -> u64 {
        1_000
    }
    fn default_adapter_max_age_ms() -> u64 {
        5_000
    }
    fn default_kv_cache_threshold() -> f64 {
        0.95
    }
    fn default_ranked_endpoints() -> usize {
        3
    }
    fn default_retry_after_s() -> u32 {
        1
    }
}

impl Default for RoutingSettings {
    fn default() -> Self {
        Self {
            scoring: ScoringMode::default(),
            profile: Profile::default(),
            weights: None,
            signal_max_age_ms: Self::default_signal_max_age_ms(),
            adapter_max_age_ms: Self::default_adapter_max_age_ms(),
            kv_cache_threshold: Self::default_kv_cache_threshold(),
            ranked_endpoints: Self::default_ranked_endpoints(),
            retry_after_s: Self::default_retry_after_s(),
            prefix: PrefixSettings::default(),
            cost: CostDefaults::default(),
            speeds: LearnedSpeeds::default(),
            admission: AdmissionSettings::default(),
        }
    }
}
