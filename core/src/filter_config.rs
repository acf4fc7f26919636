//! The filter's plugin configuration, one JSON document per role. `envoy-config`
//! renders it and the filter parses it, so both use these types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{RoutingConfig, TenantSource};
use crate::global::GlobalRouterConfig;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case", deny_unknown_fields)]
pub enum FilterConfig {
    /// The main listener's HTTP filter.
    Router(Box<RouterRole>),
    /// The control listener's HTTP filter that admits snapshot pushes.
    Control(ControlRole),
    /// The bootstrap singleton that publishes snapshots to every worker.
    Singleton,
    /// Tier 2's HTTP filter: ranks clusters and names their gateways.
    Global(Box<GlobalRole>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobalRole {
    pub config: GlobalRouterConfig,
    /// The environment variable holding the bearer token for usage reports to the
    /// rate limit service.
    pub token_env: String,
    /// Add `x-infergate-decision` to responses (class, target, ranked clusters).
    #[serde(default)]
    pub explain: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterRole {
    /// The `vm_id` shared by all roles: the other workers' prefix queues live under it.
    pub vm_id: String,
    pub routing: RoutingConfig,
    pub max_body_bytes: u64,
    /// Route as soon as `model` and the prompt's hashed bytes are in, and stream the
    /// rest of the body (`gateway.early_decision`).
    #[serde(default = "early_decision_default")]
    pub early_decision: bool,
    /// Add `x-infergate-decision` to responses (pool, basis, ranked endpoints).
    #[serde(default)]
    pub explain: bool,
    /// Where each request's tenant is read (`identity:`); unset, flow control's
    /// `tenant_header`, as a client header.
    #[serde(default)]
    pub tenant: Option<TenantSource>,
    /// The Envoy cluster of each pool whose cluster is not `pool-<name>`: Envoy Gateway
    /// and Istio name them. The gateway sends a split request's prefill leg there.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pool_clusters: BTreeMap<String, String>,
}

impl RouterRole {
    /// The Envoy cluster holding the pods of `pool`.
    pub fn cluster_of(pool_clusters: &BTreeMap<String, String>, pool: &str) -> String {
        pool_clusters.get(pool).cloned().unwrap_or_else(|| crate::wire::cluster::pool(pool))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlRole {
    /// The `vm_id` shared with the singleton, to resolve its queue.
    pub vm_id: String,
    /// The environment variable (exposed to the VM through `host_env_keys`) that holds
    /// the bearer token; keeps the token out of the rendered config.
    pub token_env: String,
}

fn early_decision_default() -> bool {
    crate::config::GatewaySettings::default().early_decision
}

impl FilterConfig {
    pub fn from_json(bytes: &[u8]) -> Result<Self, String> {
        let config: FilterConfig =
            serde_json::from_slice(bytes).map_err(|e| format!("invalid plugin configuration: {e}"))?;
        match &config {
            FilterConfig::Router(router) => {
                router.routing.validate().map_err(|e| format!("invalid plugin configuration: routing.{e}"))?;
            }
            FilterConfig::Global(global) => {
                global.config.validate().map_err(|e| format!("invalid plugin configuration: config.{e}"))?;
            }
            FilterConfig::Control(_) | FilterConfig::Singleton => {}
        }
        Ok(config)
    }
}
