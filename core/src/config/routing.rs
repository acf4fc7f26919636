//! The part of the configuration that decides routing. The filter receives it in its
//! plugin configuration at start, and again in every snapshot, so that a config change
//! reaches the data path without an Envoy reload.

use serde::{Deserialize, Serialize};

use crate::endpoint::Endpoint;

/// Everything the router needs to map a request to a pool and rank its pods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingConfig {
    #[serde(default)]
    pub settings: RoutingSettings,
    pub pools: Vec<PoolConfig>,
    pub models: Vec<ModelConfig>,
}

/// A set of interchangeable model-server pods behind one Envoy cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Lower-case letters, digits and `-`; the Envoy cluster is `pool-<name>`.
    pub name: String,
    #[serde(default)]
    pub engine: Engine,
    /// Static pod addresses, `ip:port`.
    pub endpoints: Vec<Endpoint>,
    /// Overrides `routing.weights` for this pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Weights>,
}

/// A served model name and where it lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The `model` value clients send.
    pub name: String,
    pub pool: String,
    /// The LoRA adapter that serves this model on the pool, if it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
}

/// Which metrics dialect the pool's pods speak.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    #[default]
    Vllm,
}

/// How much each scorer counts in the weighted sum. Zero disables a scorer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weights {
    #[serde(default = "Weights::default_kv_cache")]
    pub kv_cache: f64,
    #[serde(default = "Weights::default_queue_depth")]
    pub queue_depth: f64,
    #[serde(default = "Weights::default_running_requests")]
    pub running_requests: f64,
}

impl Weights {
    fn default_kv_cache() -> f64 {
        1.0
    }
    fn default_queue_depth() -> f64 {
        2.0
    }
    fn default_running_requests() -> f64 {
        1.0
    }

    pub fn as_array(&self) -> [f64; 3] {
        [self.kv_cache, self.queue_depth, self.running_requests]
    }
}

impl Default for Weights {
    fn default() -> Self {
        Self {
            kv_cache: Self::default_kv_cache(),
            queue_depth: Self::default_queue_depth(),
            running_requests: Self::default_running_requests(),
        }
    }
}

/// Knobs of the decision itself.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingSettings {
    #[serde(default)]
    pub weights: Weights,
    /// A pod's signals older than this are ignored and the pod is ranked on the
    /// gateway's own in-flight count instead.
    #[serde(default = "RoutingSettings::default_signal_max_age_ms")]
    pub signal_max_age_ms: u64,
    /// How many ranked endpoints go in `x-gateway-destination-endpoint` (first is the
    /// choice, the rest are retry targets in order).
    #[serde(default = "RoutingSettings::default_ranked_endpoints")]
    pub ranked_endpoints: usize,
    /// `Retry-After` on 503 when a pool has no ready pod.
    #[serde(default = "RoutingSettings::default_retry_after_s")]
    pub retry_after_s: u32,
}

impl RoutingSettings {
    fn default_signal_max_age_ms() -> u64 {
        1_000
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
            weights: Weights::default(),
            signal_max_age_ms: Self::default_signal_max_age_ms(),
            ranked_endpoints: Self::default_ranked_endpoints(),
            retry_after_s: Self::default_retry_after_s(),
        }
    }
}

impl RoutingConfig {
    pub fn pool(&self, name: &str) -> Option<&PoolConfig> {
        self.pools.iter().find(|p| p.name == name)
    }

    pub fn model(&self, name: &str) -> Option<&ModelConfig> {
        self.models.iter().find(|m| m.name == name)
    }

    pub fn weights_for(&self, pool: &PoolConfig) -> Weights {
        pool.weights.unwrap_or(self.settings.weights)
    }
}
