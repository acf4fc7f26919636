//! Prefill/decode disaggregation of a pool: which of its pods only prefill or only
//! decode, how a split request is carried out (llm-d's routing sidecar, or the gateway
//! itself sending the prefill leg), and what the split decision weighs. A pool without
//! this section serves every request whole on one pod.

use serde::{Deserialize, Serialize};

use super::error::{ConfigError, FieldPath};
use super::limits;
use crate::endpoint::Endpoint;

/// What a pod of a disaggregated pool does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum PodRole {
    /// Prefills and decodes: a whole request, or either leg of a split one.
    #[default]
    Both,
    /// Only the prefill leg of a split request.
    Prefill,
    /// Only decodes: a split request's decode leg, or a whole request when the split
    /// decision keeps it together.
    Decode,
}

impl PodRole {
    /// Reads llm-d's role label values (`prefill`, `decode`, `both`, and
    /// `prefill-decode` for both); anything else is `None`.
    pub fn from_label(value: &str) -> Option<Self> {
        match value {
            "both" | "prefill-decode" => Some(Self::Both),
            "prefill" => Some(Self::Prefill),
            "decode" => Some(Self::Decode),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Both => "both",
            Self::Prefill => "prefill",
            Self::Decode => "decode",
        }
    }

    /// Whether the pod can take a request's decode (and, unsplit, the whole request).
    pub fn decodes(self) -> bool {
        self != Self::Prefill
    }

    /// Whether the pod can take a split request's prefill leg.
    pub fn prefills(self) -> bool {
        self != Self::Decode
    }
}

/// How a split request reaches its two pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum DisaggMode {
    /// The filter sends the prefill leg itself (`max_tokens: 1`,
    /// `kv_transfer_params.do_remote_decode`), puts the `kv_transfer_params` it returns
    /// into the request and sends that to the decode pod: stock vLLM pods need no
    /// sidecar. A failed prefill leg is served whole on the decode pod.
    #[default]
    Gateway,
    /// The request goes to the decode pod with `x-prefiller-host-port` naming the
    /// prefill pod, for pods behind llm-d's routing sidecar, which runs the prefill leg.
    Sidecar,
}

/// When a request is split.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum SplitPolicy {
    /// When the predicted gain beats the cost: see `router::disagg`.
    #[default]
    Predicted,
    /// Every request that has a prefill pod to go to.
    Always,
    /// None: the roles only keep prefill-only pods out of decoding.
    Never,
}

/// A pool's prefill/decode disaggregation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::DISAGGREGATION)))]
#[serde(deny_unknown_fields)]
pub struct Disaggregation {
    /// How a split request reaches its two pods: `gateway` (the filter runs the
    /// prefill leg) or `sidecar` (llm-d's routing sidecar on the decode pod does).
    #[serde(default)]
    pub mode: DisaggMode,
    /// When to split: `predicted` (when the predicted gain beats the cost), `always` or
    /// `never`.
    #[serde(default)]
    pub split: SplitPolicy,
    /// Pods of `endpoints` that only prefill.
    #[cfg_attr(feature = "schema", schemars(example = serde_json::json!(["10.0.0.7:8000"])))]
    #[serde(default)]
    pub prefill_endpoints: Vec<Endpoint>,
    /// Pods of `endpoints` that only decode. Pods in neither list do both.
    #[cfg_attr(feature = "schema", schemars(example = serde_json::json!(["10.0.0.5:8000"])))]
    #[serde(default)]
    pub decode_endpoints: Vec<Endpoint>,
    /// The pod label that gives a discovered pod's role (`prefill`, `decode` or `both`),
    /// as llm-d labels them; a pod without it does both.
    #[serde(default = "Disaggregation::default_role_label")]
    pub role_label: String,
    /// KV-cache bytes per prompt token that a split moves from the prefill pod to the
    /// decode pod: 2 × layers × KV heads × head size × bytes per value (131,072 for
    /// Llama-3.1-8B in BF16).
    #[serde(default = "Disaggregation::default_kv_bytes_per_token")]
    pub kv_bytes_per_token: u64,
    /// The transfer's bandwidth between two pods, gigabytes per second.
    #[serde(default = "Disaggregation::default_transfer_gb_per_s")]
    pub transfer_gb_per_s: f64,
    /// Prompts with fewer tokens not cached on the decode pod than this are never
    /// split: the transfer and the second request cost more than they save.
    #[serde(default = "Disaggregation::default_min_split_tokens")]
    pub min_split_tokens: u32,
    /// How long the gateway waits for a prefill leg before it serves the request whole
    /// on the decode pod (`gateway` mode).
    #[serde(default = "Disaggregation::default_prefill_timeout_ms")]
    pub prefill_timeout_ms: u64,
    /// The time to first token the split decision aims to keep under. Once the prefill
    /// pods' predicted TTFT passes 30% of it, a request goes whole to a decode pod that
    /// has room to prefill it.
    #[serde(default = "Disaggregation::default_ttft_target_ms")]
    pub ttft_target_ms: u64,
    /// The inter-token latency the split decision aims to keep each request's p90
    /// under. A decode pod whose engine steps take over half of it gets no more whole
    /// prompts while a prefill pod can take them.
    #[serde(default = "Disaggregation::default_itl_target_ms")]
    pub itl_target_ms: u64,
}

impl Default for Disaggregation {
    fn default() -> Self {
        Self {
            mode: DisaggMode::default(),
            split: SplitPolicy::default(),
            prefill_endpoints: Vec::new(),
            decode_endpoints: Vec::new(),
            role_label: Self::default_role_label(),
            kv_bytes_per_token: Self::default_kv_bytes_per_token(),
            transfer_gb_per_s: Self::default_transfer_gb_per_s(),
            min_split_tokens: Self::default_min_split_tokens(),
            prefill_timeout_ms: Self::default_prefill_timeout_ms(),
            ttft_target_ms: Self::default_ttft_target_ms(),
            itl_target_ms: Self::default_itl_target_ms(),
        }
    }
}

impl Disaggregation {
    fn default_role_label() -> String {
        "llm-d.ai/role".to_string()
    }
    fn default_kv_bytes_per_token() -> u64 {
        131_072
    }
    fn default_transfer_gb_per_s() -> f64 {
        25.0
    }
    fn default_min_split_tokens() -> u32 {
        256
    }
    fn default_prefill_timeout_ms() -> u64 {
        30_000
    }
    fn default_ttft_target_ms() -> u64 {
        2_000
    }
    fn default_itl_target_ms() -> u64 {
        50
    }

    /// The role the static lists give `endpoint`.
    pub fn role_of(&self, endpoint: Endpoint) -> PodRole {
        if self.prefill_endpoints.contains(&endpoint) {
            PodRole::Prefill
        } else if self.decode_endpoints.contains(&endpoint) {
            PodRole::Decode
        } else {
            PodRole::Both
        }
    }

    /// Milliseconds to move the KV cache of `tokens` prompt tokens between two pods.
    pub fn transfer_ms(&self, tokens: f64) -> f64 {
        let bytes = tokens.max(0.0) * self.kv_bytes_per_token as f64;
        1000.0 * bytes / (self.transfer_gb_per_s * 1e9)
    }

    pub(crate) fn check(&self, pool_endpoints: &[Endpoint], at: &FieldPath) -> Result<(), ConfigError> {
        limits::KV_BYTES_PER_TOKEN.check_integer(self.kv_bytes_per_token, at)?;
        limits::TRANSFER_GB_PER_S.check_number(self.transfer_gb_per_s, at)?;
        limits::PREFILL_TIMEOUT_MS.check_integer(self.prefill_timeout_ms, at)?;
        limits::TTFT_TARGET_MS.check_integer(self.ttft_target_ms, at)?;
        limits::ITL_TARGET_MS.check_integer(self.itl_target_ms, at)?;
        if self.role_label.trim().is_empty() {
            return Err(limits::ROLE_LABEL.error(at, "an empty label"));
        }
        for (key, list) in
            [("prefill_endpoints", &self.prefill_endpoints), ("decode_endpoints", &self.decode_endpoints)]
        {
            for (i, endpoint) in list.iter().enumerate() {
                let here = at.key(key).index(i);
                if !pool_endpoints.contains(endpoint) {
                    return Err(ConfigError::at(&here, format!("{endpoint} is not one of the pool's `endpoints`")));
                }
                if key == "decode_endpoints" && self.prefill_endpoints.contains(endpoint) {
                    return Err(ConfigError::at(&here, format!("{endpoint} is listed as both prefill and decode")));
                }
            }
        }
        Ok(())
    }
}
