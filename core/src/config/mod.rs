//! `infergate.yaml`, schema version 1: the one source of truth for the gateway, the
//! agent and the rendered Envoy config.

mod admission;
mod disaggregation;
mod discovery;
mod error;
mod flow_control;
mod identity;
pub mod limits;
#[cfg(feature = "schema")]
pub mod reference;
mod routing;
mod scoring;
mod validate;
#[cfg(feature = "yaml")]
mod yaml;
#[cfg(feature = "yaml")]
pub(crate) use yaml::{ValidatedFile, from_yaml_file, from_yaml_str};

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

pub use admission::{AdmissionSettings, Criticality};
pub use disaggregation::{DisaggMode, Disaggregation, PodRole, SplitPolicy};
pub use discovery::{Discovery, DiscoverySource, InferencePoolRef, PodSelector};
pub use error::{ConfigError, FieldPath, Location, PathSegment};
pub use flow_control::{BandLimits, BandSettings, Bands, Fairness, FlowControlSettings, QueueOrder};
pub use identity::{IdentitySettings, IdentitySource, JwtSettings, TenantSource};
pub use routing::{Engine, ModelConfig, PoolConfig, RoutingConfig};
pub use scoring::{CostDefaults, LearnedSpeeds, PrefixSettings, Profile, RoutingSettings, ScoringMode, Weights};
pub use validate::{MAX_MODEL_NAME_BYTES, check_model_name};

pub const SCHEMA_VERSION: u32 = 1;

/// The whole `infergate.yaml` document: the gateway (Envoy's rendered config and the
/// filter), the metrics agent and the routing all read this one file, and the
/// InferenceGatewayConfig resource's `spec` is the same document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(transform = limits::Annotate(limits::INFERGATE), transform = reference::LinkToReference)
)]
#[serde(deny_unknown_fields)]
pub struct InfergateConfig {
    /// The schema version of the file; this build reads version 1.
    #[cfg_attr(feature = "schema", schemars(example = SCHEMA_VERSION))]
    pub version: u32,
    #[serde(default)]
    pub gateway: GatewaySettings,
    #[serde(default)]
    pub agent: AgentSettings,
    #[serde(default)]
    pub routing: RoutingSettings,
    #[serde(default)]
    pub flow_control: FlowControlSettings,
    #[serde(default)]
    pub identity: IdentitySettings,
    /// The pools of model-server pods; each becomes an Envoy cluster.
    pub pools: Vec<PoolConfig>,
    /// The model names clients send, each served by one pool.
    pub models: Vec<ModelConfig>,
}

/// Where Envoy listens and what it accepts: rendered into Envoy's config by
/// `infergate-envoy-config`; the filter reads the body limit and early decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::GATEWAY)))]
#[serde(deny_unknown_fields)]
pub struct GatewaySettings {
    /// The OpenAI-compatible listener clients call.
    #[serde(default = "GatewaySettings::default_listen")]
    pub listen: SocketAddr,
    /// The listener the agent pushes snapshots to. Keep it on loopback, or on an
    /// address that only the agent can reach.
    #[serde(default = "GatewaySettings::default_control")]
    pub control: SocketAddr,
    /// Envoy's admin interface.
    #[serde(default = "GatewaySettings::default_admin")]
    pub admin: SocketAddr,
    /// Largest accepted request body; larger ones get an OpenAI-style 413.
    #[serde(default = "GatewaySettings::default_max_body_bytes")]
    pub max_body_bytes: u64,
    /// Upstream timeout for a whole request, streaming included.
    #[serde(default = "GatewaySettings::default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// How many times Envoy retries a failed attempt on the next ranked pod.
    #[serde(default = "GatewaySettings::default_retries")]
    pub retries: u32,
    /// Route a request as soon as its `model` and the prompt bytes prefix hashing reads
    /// have arrived, then stream the rest of the body to the pod (still checked: an
    /// invalid body is answered with a 400 before its end reaches the pod). Needs a
    /// declared `content-length`; off under flow control, which may hold a request.
    #[serde(default = "GatewaySettings::default_early_decision")]
    pub early_decision: bool,
}

impl GatewaySettings {
    fn default_listen() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 8080))
    }
    fn default_control() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 9902))
    }
    fn default_admin() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 9901))
    }
    fn default_max_body_bytes() -> u64 {
        8 * 1024 * 1024
    }
    fn default_request_timeout_ms() -> u64 {
        300_000
    }
    fn default_retries() -> u32 {
        2
    }
    fn default_early_decision() -> bool {
        true
    }
}

impl Default for GatewaySettings {
    fn default() -> Self {
        Self {
            listen: Self::default_listen(),
            control: Self::default_control(),
            admin: Self::default_admin(),
            max_body_bytes: Self::default_max_body_bytes(),
            request_timeout_ms: Self::default_request_timeout_ms(),
            retries: Self::default_retries(),
            early_decision: Self::default_early_decision(),
        }
    }
}

/// How the metrics agent scrapes the pods; read by the agent only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::AGENT)))]
#[serde(deny_unknown_fields)]
pub struct AgentSettings {
    /// How often every pod is scraped, and so how often a snapshot is pushed.
    #[serde(default = "AgentSettings::default_scrape_interval_ms")]
    pub scrape_interval_ms: u64,
    /// Per-pod scrape timeout; a slow pod never delays the snapshot past this. At most
    /// 10 scrape intervals.
    #[serde(default = "AgentSettings::default_scrape_timeout_ms")]
    pub scrape_timeout_ms: u64,
}

impl AgentSettings {
    fn default_scrape_interval_ms() -> u64 {
        100
    }
    fn default_scrape_timeout_ms() -> u64 {
        80
    }
}

impl Default for AgentSettings {
    fn default() -> Self {
        Self {
            scrape_interval_ms: Self::default_scrape_interval_ms(),
            scrape_timeout_ms: Self::default_scrape_timeout_ms(),
        }
    }
}

impl GatewaySettings {
    /// Checks the limits; `path` is where the settings sit in their file.
    pub fn validate(&self, path: &FieldPath) -> Result<(), ConfigError> {
        limits::MAX_BODY_BYTES.check_integer(self.max_body_bytes, path)?;
        limits::REQUEST_TIMEOUT_MS.check_integer(self.request_timeout_ms, path)
    }
}

impl AgentSettings {
    /// Checks the limits; `path` is where the settings sit in their file.
    pub fn validate(&self, path: &FieldPath) -> Result<(), ConfigError> {
        limits::SCRAPE_INTERVAL_MS.check_integer(self.scrape_interval_ms, path)?;
        let longest = self.scrape_interval_ms.saturating_mul(limits::SCRAPE_TIMEOUT_INTERVALS);
        if self.scrape_timeout_ms == 0 || self.scrape_timeout_ms > longest {
            return Err(limits::SCRAPE_TIMEOUT_MS.error(path, self.scrape_timeout_ms));
        }
        Ok(())
    }
}

/// Refuses a file written for another schema version; every config file has one.
pub(crate) fn check_schema_version(version: u32, root: &FieldPath) -> Result<(), ConfigError> {
    if limits::VERSION.rule.admits_integer(u64::from(version)) {
        return Ok(());
    }
    Err(ConfigError::at(
        &root.key("version"),
        format!("unsupported schema version {version}; this build reads version {SCHEMA_VERSION}"),
    ))
}

impl InfergateConfig {
    /// Checks everything serde cannot; the error names the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let root = FieldPath::root();
        check_schema_version(self.version, &root)?;
        self.gateway.validate(&root.key("gateway"))?;
        self.agent.validate(&root.key("agent"))?;
        validate::check_settings(&self.routing, &root.key("routing"))?;
        self.flow_control.validate(&root.key("flow_control"))?;
        self.identity.validate(&root.key("identity"))?;
        validate::check_pools(&self.pools, &root.key("pools"))?;
        validate::check_models(&self.models, &self.pools, &root.key("models"))
    }

    /// Where the router reads each request's tenant.
    pub fn tenant_source(&self) -> TenantSource {
        self.identity.tenant_source(&self.flow_control.tenant_header)
    }

    /// The routing part, as the filter and the snapshot carry it.
    pub fn routing_config(&self) -> RoutingConfig {
        RoutingConfig {
            settings: self.routing,
            flow_control: self.flow_control.clone(),
            pools: self.pools.clone(),
            models: self.models.clone(),
        }
    }
}

impl RoutingConfig {
    /// The same checks as for the file, with paths relative to this object.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let root = FieldPath::root();
        validate::check_settings(&self.settings, &root.key("settings"))?;
        self.flow_control.validate(&root.key("flow_control"))?;
        validate::check_pools(&self.pools, &root.key("pools"))?;
        validate::check_models(&self.models, &self.pools, &root.key("models"))
    }
}

#[cfg(test)]
mod tests;
