//! Manifests for a gateway in Kubernetes: the filter's three roles placed through
//! Envoy Gateway's or Istio's APIs, plus what both share (one Service per pool, one
//! HTTPRoute, the control listener, the singleton, the module's source cluster).

pub mod envoy_gateway;
pub mod inference_pool;
pub mod istio;
mod shared;

use std::fmt;

pub use shared::{CONTROL_LISTENER, CONTROL_SERVICE, WASM_SOURCE_CLUSTER, pool_service_name};

use crate::{DEFAULT_TOKEN_ENV, PluginConfigError, WasmRuntime};

/// The Gateway API `Gateway` whose listener carries the OpenAI endpoint.
#[derive(Debug, Clone)]
pub struct GatewayRef {
    pub namespace: String,
    pub name: String,
    /// The `sectionName` of the listener clients reach.
    pub listener: String,
    /// The port of that listener.
    pub port: u16,
    /// Where the platform runs the gateway's Envoy pods: Envoy Gateway's own namespace
    /// (`envoy-gateway-system`) by default, the Gateway's for Istio. The control Service,
    /// the NetworkPolicy and the token's Secret go there.
    pub pods_namespace: String,
}

/// Where the gateway fetches `infergate_filter.wasm`.
#[derive(Debug, Clone)]
pub struct WasmSource {
    /// An `http://` or `https://` URL serving the module.
    pub url: String,
    /// Its SHA-256, lowercase hex: Envoy refuses any other module.
    pub sha256: String,
    /// An OCI image (`registry/repo:tag`) for the router, where the platform pulls images
    /// itself (Envoy Gateway). The singleton and the control filter still use `url`.
    pub image: Option<String>,
}

/// Choices about the cluster, beyond `infergate.yaml`.
#[derive(Debug, Clone)]
pub struct KubernetesOptions {
    /// Namespace of the Services, the HTTPRoute and the router's policy: the pools'.
    pub namespace: String,
    pub gateway: GatewayRef,
    pub wasm: WasmSource,
    pub runtime: WasmRuntime,
    /// The gateway container's environment variable that holds the control token.
    pub token_env: String,
    /// The Secret (in the gateway pods' namespace) whose `token` key holds it.
    pub token_secret: String,
}

impl KubernetesOptions {
    pub fn new(gateway: GatewayRef, wasm: WasmSource) -> Self {
        Self {
            namespace: gateway.namespace.clone(),
            gateway,
            wasm,
            runtime: WasmRuntime::V8,
            token_env: DEFAULT_TOKEN_ENV.to_string(),
            token_secret: "infergate-control-token".to_string(),
        }
    }
}

/// Why `infergate.yaml` cannot be placed in a cluster as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenderError {
    /// A pool has no `discovery.pods`: its Service needs a selector and a port.
    PoolWithoutPodSelector {
        pool: String,
    },
    /// Pools in several namespaces: one HTTPRoute can only name Services of its own.
    PoolOutsideNamespace {
        pool: String,
        pool_namespace: String,
        namespace: String,
    },
    BadWasmUrl {
        url: String,
        reason: String,
    },
    BadSha256 {
        sha256: String,
    },
    /// A role's plugin configuration could not be written as JSON.
    PluginConfig(PluginConfigError),
    /// The identity's JWKS file could not be read, to be written into the manifests.
    Identity(String),
}

impl fmt::Display for RenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenderError::PoolWithoutPodSelector { pool } => write!(
                f,
                "pool {pool}: Kubernetes manifests need `discovery.pods` (namespace, match_labels, target_ports) \
                 for the pool's Service; static endpoints and InferencePool references are not enough"
            ),
            RenderError::PoolOutsideNamespace { pool, pool_namespace, namespace } => write!(
                f,
                "pool {pool} is in namespace {pool_namespace}, but the HTTPRoute goes in {namespace}; \
                 put every pool in one namespace or pass --namespace {pool_namespace}"
            ),
            RenderError::BadWasmUrl { url, reason } => write!(f, "wasm URL {url:?}: {reason}"),
            RenderError::BadSha256 { sha256 } => {
                write!(f, "wasm SHA-256 {sha256:?} is not 64 lowercase hex digits")
            }
            RenderError::PluginConfig(error) => error.fmt(f),
            RenderError::Identity(reason) => f.write_str(reason),
        }
    }
}

impl std::error::Error for RenderError {}

impl From<PluginConfigError> for RenderError {
    fn from(error: PluginConfigError) -> Self {
        RenderError::PluginConfig(error)
    }
}

/// Several manifests as one multi-document YAML file.
pub fn to_yaml_documents(header: &str, documents: &[serde_json::Value]) -> Result<String, String> {
    let mut text = format!("# {header}\n");
    for document in documents {
        text.push_str("---\n");
        text.push_str(&serde_yaml_ng::to_string(document).map_err(|e| e.to_string())?);
    }
    Ok(text)
}
