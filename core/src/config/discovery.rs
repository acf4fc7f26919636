//! Where a pool's pods come from besides its static `endpoints`: Kubernetes pods
//! selected by label, or a Gateway API Inference Extension `InferencePool`. The agent
//! resolves these; the filter only ever sees the resulting pod addresses.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[cfg(feature = "schema")]
use super::limits;

/// A pool's discovery source: exactly one of the fields is set. (A struct rather than
/// an enum, so that YAML reads `discovery: {pods: ...}` without tags.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Discovery {
    /// Ready, non-terminating pods matching `match_labels` in `namespace`; each
    /// pod contributes `pod_ip:port` for every target port (one per data-parallel rank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<PodSelector>,
    /// The pods of an `inference.networking.k8s.io/v1` InferencePool, whose selector
    /// and target ports are read from the cluster and followed as they change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference_pool: Option<InferencePoolRef>,
}

/// The one source a valid [`Discovery`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoverySource<'a> {
    Pods(&'a PodSelector),
    InferencePool(&'a InferencePoolRef),
}

impl Discovery {
    /// The source, if exactly one is set (validation guarantees it).
    pub fn source(&self) -> Option<DiscoverySource<'_>> {
        match (&self.pods, &self.inference_pool) {
            (Some(pods), None) => Some(DiscoverySource::Pods(pods)),
            (None, Some(pool)) => Some(DiscoverySource::InferencePool(pool)),
            _ => None,
        }
    }
}

/// Pods selected by label in one namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::POD_SELECTOR)))]
#[serde(deny_unknown_fields)]
pub struct PodSelector {
    /// The namespace the pods run in.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// The labels a pod must all have.
    #[cfg_attr(feature = "schema", schemars(example = serde_json::json!({"app": "vllm-llama"})))]
    pub match_labels: BTreeMap<String, String>,
    /// The pod ports the engine serves on, one per data-parallel rank.
    #[cfg_attr(feature = "schema", schemars(example = serde_json::json!([8000])))]
    pub target_ports: Vec<u16>,
}

/// A Gateway API Inference Extension `InferencePool`, by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::INFERENCE_POOL_REF)))]
#[serde(deny_unknown_fields)]
pub struct InferencePoolRef {
    /// The InferencePool's namespace.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// The InferencePool's name.
    #[cfg_attr(feature = "schema", schemars(example = &"qwen"))]
    pub name: String,
}

fn default_namespace() -> String {
    "default".to_string()
}

impl PodSelector {
    /// The selector in the API server's `labelSelector` query syntax.
    pub fn label_selector(&self) -> String {
        let pairs: Vec<String> = self.match_labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        pairs.join(",")
    }
}
