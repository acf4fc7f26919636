//! The part of the configuration that decides routing. The filter receives it in its
//! plugin configuration at start, and again in every snapshot, so that a config change
//! reaches the data path without an Envoy reload.

use serde::{Deserialize, Serialize};

#[cfg(feature = "schema")]
use super::limits;

use super::admission::Criticality;
use super::disaggregation::{Disaggregation, PodRole};
use super::discovery::Discovery;
use super::flow_control::FlowControlSettings;
use super::scoring::{Profile, RoutingSettings, Weights};
use crate::endpoint::Endpoint;

/// Everything the router needs to map a request to a pool and rank its pods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RoutingConfig {
    #[serde(default)]
    pub settings: RoutingSettings,
    #[serde(default)]
    pub flow_control: FlowControlSettings,
    pub pools: Vec<PoolConfig>,
    pub models: Vec<ModelConfig>,
}

/// A set of interchangeable model-server pods behind one Envoy cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::POOL)))]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// The pool's name, which models refer to; the Envoy cluster is `pool-<name>`.
    #[cfg_attr(feature = "schema", schemars(example = &"llama"))]
    pub name: String,
    #[serde(default)]
    pub engine: Engine,
    /// The path the agent scrapes on each pod: by default `/prometheus/metrics` for
    /// trtllm-serve (whose `/metrics` is JSON) and `/metrics` for the others.
    #[cfg_attr(feature = "schema", schemars(example = "/stats/prometheus"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_path: Option<String>,
    /// Static pod addresses, `ip:port` (IPv6 as `[addr]:port`).
    #[cfg_attr(feature = "schema", schemars(example = serde_json::json!(["10.0.0.5:8000", "10.0.0.6:8000"])))]
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
    /// Pods found in Kubernetes, added to `endpoints` by the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<Discovery>,
    /// Overrides `routing.profile` for this pool; unset, the pool takes `routing.profile`.
    #[cfg_attr(feature = "schema", schemars(example = Profile::Throughput))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
    /// Overrides `routing.weights` (and the profile's weights) for this pool; unset, the
    /// pool takes `routing.weights`, else its profile's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Weights>,
    /// Prefill/decode disaggregation: which pods only prefill or only decode, and how a
    /// request is split between two. Unset, every request is served whole on one pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disaggregation: Option<Disaggregation>,
}

/// A served model name and where it lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::MODEL)))]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The `model` value clients send.
    #[cfg_attr(feature = "schema", schemars(example = "meta-llama/Llama-3.1-8B-Instruct"))]
    pub name: String,
    /// The `name` of the pool that serves it.
    #[cfg_attr(feature = "schema", schemars(example = &"llama"))]
    pub pool: String,
    /// The LoRA adapter that serves this model on the pool, if it is one; unset, the
    /// model is the pool's base model.
    #[cfg_attr(feature = "schema", schemars(example = "sql-lora"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// Whether its requests may be refused while the pool is saturated; a client can
    /// lower it per request with `x-infergate-criticality`. Under flow control it is
    /// also the request's band.
    #[cfg_attr(feature = "schema", schemars(extend("default" = Criticality::default())))]
    #[serde(default, skip_serializing_if = "is_standard")]
    pub criticality: Criticality,
}

impl PoolConfig {
    /// A pool of these pods, speaking vLLM's metrics, with no overrides.
    pub fn static_endpoints(name: &str, endpoints: Vec<Endpoint>) -> Self {
        Self {
            name: name.into(),
            engine: Engine::default(),
            metrics_path: None,
            endpoints,
            discovery: None,
            profile: None,
            weights: None,
            disaggregation: None,
        }
    }

    /// The role the static configuration gives `endpoint` (discovered pods get theirs
    /// from a label, in the snapshot).
    pub fn role_of(&self, endpoint: Endpoint) -> PodRole {
        self.disaggregation.as_ref().map_or(PodRole::Both, |d| d.role_of(endpoint))
    }

    /// Where the agent scrapes this pool's pods.
    pub fn metrics_path(&self) -> &str {
        match (&self.metrics_path, self.engine) {
            (Some(path), _) => path,
            (None, Engine::Trtllm) => "/prometheus/metrics",
            (None, _) => "/metrics",
        }
    }
}

impl ModelConfig {
    /// A base model (no adapter) of standard criticality on `pool`.
    pub fn base(name: &str, pool: &str) -> Self {
        Self { name: name.into(), pool: pool.into(), adapter: None, criticality: Criticality::default() }
    }
}

fn is_standard(criticality: &Criticality) -> bool {
    *criticality == Criticality::Standard
}

/// Which metrics dialect the pool's pods speak.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// vLLM V1 and V0 (`vllm:*`).
    #[default]
    Vllm,
    /// SGLang (`sglang:*`).
    Sglang,
    /// trtllm-serve (`trtllm_*`).
    Trtllm,
    /// Triton with the TensorRT-LLM backend (`nv_trt_llm_*`).
    Triton,
    /// llama.cpp server (`llamacpp:*`).
    LlamaCpp,
    /// Recognized from the metric names of each scrape.
    Auto,
}

impl RoutingConfig {
    /// One pool of static endpoints serving one base model, every setting at its
    /// default: the smallest working config.
    pub fn single_pool(pool: &str, endpoints: Vec<Endpoint>, model: &str) -> Self {
        Self {
            settings: RoutingSettings::default(),
            flow_control: FlowControlSettings::default(),
            pools: vec![PoolConfig::static_endpoints(pool, endpoints)],
            models: vec![ModelConfig::base(model, pool)],
        }
    }

    pub fn pool(&self, name: &str) -> Option<&PoolConfig> {
        self.pools.iter().find(|p| p.name == name)
    }

    pub fn model(&self, name: &str) -> Option<&ModelConfig> {
        self.models.iter().find(|m| m.name == name)
    }

    pub fn profile_for(&self, pool: &PoolConfig) -> Profile {
        pool.profile.unwrap_or(self.settings.profile)
    }

    /// The pool's weights: its own, else the file's, else its profile's preset.
    pub fn weights_for(&self, pool: &PoolConfig) -> Weights {
        pool.weights.or(self.settings.weights).unwrap_or_else(|| self.profile_for(pool).weights())
    }
}
