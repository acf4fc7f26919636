//! `infergate-global.yaml`: the global router's listeners and the clusters behind it.

use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, FieldPath, GatewaySettings, check_schema_version};
use crate::endpoint::Endpoint;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobalRouterConfig {
    pub version: u32,
    /// The global router's own listeners (clients, the agents' summaries, admin) and
    /// its body limit, timeout and retries (each retry goes to the next cluster).
    #[serde(default)]
    pub gateway: GatewaySettings,
    pub global: GlobalSettings,
    pub clusters: Vec<ClusterConfig>,
    /// Global limits per tenant and model, enforced by Envoy's rate limit filter and
    /// `infergate-ratelimit`; absent, nothing is limited.
    #[serde(default)]
    pub rate_limits: Option<RateLimits>,
}

/// Requests and tokens per minute, per tenant and model, counted in Redis so that
/// every replica of the global router and of the rate limit service shares them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimits {
    /// Where `infergate-ratelimit` serves Envoy's gRPC rate limit API, `ip:port`.
    pub service: Endpoint,
    /// Where it serves `POST /v1/usage`, the filter's token reconciliation, `ip:port`.
    pub usage: Endpoint,
    /// The Redis the counters live in.
    #[serde(default = "RateLimits::default_redis")]
    pub redis: String,
    /// The request header that names the tenant; its value is hashed before use, so an
    /// API key in `authorization` never reaches Redis or a log.
    #[serde(default = "RateLimits::default_tenant_header")]
    pub tenant_header: String,
    /// Limits of every model without its own.
    pub default: Limits,
    #[serde(default)]
    pub models: Vec<ModelLimits>,
    /// Refuse requests while the rate limit service cannot answer (default: admit).
    #[serde(default)]
    pub failure_mode_deny: bool,
}

impl RateLimits {
    fn default_redis() -> String {
        "redis://127.0.0.1:6379".to_string()
    }
    fn default_tenant_header() -> String {
        "authorization".to_string()
    }

    /// The limits that apply to `model`.
    pub fn for_model(&self, model: &str) -> Limits {
        self.models.iter().find(|m| m.model == model).map_or(self.default, |m| Limits {
            requests_per_minute: m.requests_per_minute,
            tokens_per_minute: m.tokens_per_minute,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub requests_per_minute: u64,
    pub tokens_per_minute: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelLimits {
    pub model: String,
    pub requests_per_minute: u64,
    pub tokens_per_minute: u64,
}

/// How clusters are ranked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobalSettings {
    /// The region this router is in: its clusters have no round trip to pay, come first
    /// among equally cheap ones, and are tried first when no cluster meets the target.
    pub local_region: String,
    /// A cluster whose newest summary is two of its agent's intervals old is drained
    /// (the summary says its interval); this caps that wait, and is the limit for a
    /// summary that does not say.
    #[serde(default = "GlobalSettings::default_summary_max_age_ms")]
    pub summary_max_age_ms: u64,
    /// The class of a request without `x-infergate-class`.
    #[serde(default)]
    pub default_class: RequestClass,
    #[serde(default)]
    pub targets: ClassTargets,
    /// The round trip to another region's cluster, added to its predicted time to first
    /// token before it is compared with the target or with a local cluster.
    #[serde(default = "GlobalSettings::default_cross_region_rtt_ms")]
    pub cross_region_rtt_ms: f64,
}

impl GlobalSettings {
    fn default_summary_max_age_ms() -> u64 {
        2_000
    }
    fn default_cross_region_rtt_ms() -> f64 {
        60.0
    }
}

/// What a request is willing to wait for its first token: the class sets the target
/// that the cheapest cluster must meet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestClass {
    /// Interactive: a short target (`targets.latency_ttft_ms`).
    #[default]
    Latency,
    /// Offline: a long target (`targets.batch_ttft_ms`), so cheap clusters qualify
    /// even when busy.
    Batch,
}

impl RequestClass {
    pub fn from_header(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "latency" => Some(Self::Latency),
            "batch" => Some(Self::Batch),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Latency => "latency",
            Self::Batch => "batch",
        }
    }
}

/// The predicted time to first token each class accepts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassTargets {
    #[serde(default = "ClassTargets::default_latency_ttft_ms")]
    pub latency_ttft_ms: f64,
    #[serde(default = "ClassTargets::default_batch_ttft_ms")]
    pub batch_ttft_ms: f64,
}

impl ClassTargets {
    fn default_latency_ttft_ms() -> f64 {
        500.0
    }
    fn default_batch_ttft_ms() -> f64 {
        30_000.0
    }

    pub fn for_class(&self, class: RequestClass) -> f64 {
        match class {
            RequestClass::Latency => self.latency_ttft_ms,
            RequestClass::Batch => self.batch_ttft_ms,
        }
    }
}

impl Default for ClassTargets {
    fn default() -> Self {
        Self { latency_ttft_ms: Self::default_latency_ttft_ms(), batch_ttft_ms: Self::default_batch_ttft_ms() }
    }
}

/// One cluster behind the global router: its tier-1 gateway and what it costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The name its agent sends in summaries (`metrics-agent run --cluster NAME`).
    pub name: String,
    pub region: String,
    /// The cluster's tier-1 gateway, `ip:port`.
    pub gateway: Endpoint,
    /// What serving a million tokens costs there (any currency, the same for all).
    pub cost_per_million_tokens: f64,
}

impl GlobalRouterConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let root = FieldPath::root();
        check_schema_version(self.version, &root)?;
        self.gateway.validate(&root.key("gateway"))?;
        let global = root.key("global");
        if self.global.local_region.trim().is_empty() {
            return Err(ConfigError::at(&global.key("local_region"), "must name a region"));
        }
        if self.global.summary_max_age_ms < 10 {
            return Err(ConfigError::at(&global.key("summary_max_age_ms"), "must be at least 10"));
        }
        let rtt = self.global.cross_region_rtt_ms;
        if !(rtt.is_finite() && rtt >= 0.0) {
            return Err(ConfigError::at(
                &global.key("cross_region_rtt_ms"),
                format!("must be a non-negative number, got {rtt}"),
            ));
        }
        let targets = global.key("targets");
        for (name, value) in [
            ("latency_ttft_ms", self.global.targets.latency_ttft_ms),
            ("batch_ttft_ms", self.global.targets.batch_ttft_ms),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(ConfigError::at(&targets.key(name), format!("must be a positive number, got {value}")));
            }
        }
        if let Some(limits) = &self.rate_limits {
            let path = root.key("rate_limits");
            if limits.tenant_header.trim().is_empty() || limits.tenant_header.starts_with("x-infergate-") {
                return Err(ConfigError::at(
                    &path.key("tenant_header"),
                    "must name a client header (the gateway's own x-infergate-* headers are stripped)",
                ));
            }
            if !limits.redis.starts_with("redis://") {
                return Err(ConfigError::at(&path.key("redis"), "must be a redis:// URL"));
            }
            for (index, model) in limits.models.iter().enumerate() {
                if limits.models.iter().take(index).any(|m| m.model == model.model) {
                    return Err(ConfigError::at(
                        &path.key("models").index(index).key("model"),
                        format!("duplicate model {:?}", model.model),
                    ));
                }
            }
        }
        let clusters = root.key("clusters");
        if self.clusters.is_empty() {
            return Err(ConfigError::at(&clusters, "at least one cluster is required"));
        }
        for (index, cluster) in self.clusters.iter().enumerate() {
            let path = clusters.index(index);
            if cluster.name.trim().is_empty() || cluster.name.len() > 128 {
                return Err(ConfigError::at(&path.key("name"), "must be 1 to 128 characters"));
            }
            if self.clusters.iter().take(index).any(|c| c.name == cluster.name) {
                return Err(ConfigError::at(&path.key("name"), format!("duplicate cluster name {:?}", cluster.name)));
            }
            if self.clusters.iter().take(index).any(|c| c.gateway == cluster.gateway) {
                return Err(ConfigError::at(
                    &path.key("gateway"),
                    format!("gateway {} is already cluster {:?}'s", cluster.gateway, cluster.name),
                ));
            }
            if cluster.region.trim().is_empty() {
                return Err(ConfigError::at(&path.key("region"), "must name a region"));
            }
            if !(cluster.cost_per_million_tokens.is_finite() && cluster.cost_per_million_tokens >= 0.0) {
                return Err(ConfigError::at(
                    &path.key("cost_per_million_tokens"),
                    format!("must be a finite, non-negative number, got {}", cluster.cost_per_million_tokens),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(feature = "yaml")]
impl crate::config::ValidatedFile for GlobalRouterConfig {
    fn check(&self) -> Result<(), ConfigError> {
        self.validate()
    }
}

#[cfg(feature = "yaml")]
impl GlobalRouterConfig {
    /// Parses and validates; errors carry the line and column of the field at fault.
    pub fn from_yaml_str(text: &str, source_name: &str) -> Result<Self, ConfigError> {
        crate::config::from_yaml_str(text, source_name)
    }

    pub fn from_yaml_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        crate::config::from_yaml_file(path)
    }
}
