//! `infergate-global.yaml`: the global router's listeners and the clusters behind it.

use serde::{Deserialize, Serialize};

#[cfg(feature = "schema")]
use crate::config::limits::{Annotate, VERSION};
use crate::config::limits::{Limit, Rule};
use crate::config::{ConfigError, FieldPath, GatewaySettings, IdentitySettings, TenantSource, check_schema_version};
use crate::endpoint::Endpoint;

/// The whole `infergate-global.yaml` document, for the global router (tier 2): its
/// own Envoy and filter, in front of several clusters' tier-1 gateways. Each cluster
/// keeps its own `infergate.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = Annotate(GLOBAL_ROUTER)))]
#[serde(deny_unknown_fields)]
pub struct GlobalRouterConfig {
    /// The schema version of the file; this build reads version 1.
    #[cfg_attr(feature = "schema", schemars(example = crate::config::SCHEMA_VERSION))]
    pub version: u32,
    /// The global router's own listeners (clients, the agents' summaries, admin) and
    /// its body limit, timeout and retries (each retry goes to the next cluster).
    #[serde(default)]
    pub gateway: GatewaySettings,
    pub global: GlobalSettings,
    /// The clusters requests are spread over.
    pub clusters: Vec<ClusterConfig>,
    /// Global limits per tenant and model, enforced by Envoy's rate limit filter and
    /// `infergate-ratelimit`; absent, nothing is limited.
    #[serde(default)]
    pub rate_limits: Option<RateLimits>,
    /// Where a request's tenant comes from, as in `infergate.yaml`: with a `jwt` or
    /// `trusted-header` identity, the rate limits count a verified tenant, and rotating
    /// made-up API keys no longer escapes them. Unset, `rate_limits.tenant_header`.
    #[serde(default)]
    pub identity: IdentitySettings,
}

/// Requests and tokens per minute, per tenant and model, counted in Redis so that
/// every replica of the global router and of the rate limit service shares them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = Annotate(RATE_LIMITS)))]
#[serde(deny_unknown_fields)]
pub struct RateLimits {
    /// Where `infergate-ratelimit` serves Envoy's gRPC rate limit API, `ip:port`.
    #[cfg_attr(feature = "schema", schemars(example = "127.0.0.1:8091"))]
    pub service: Endpoint,
    /// Where it serves `POST /v1/usage`, the filter's token reconciliation, `ip:port`.
    #[cfg_attr(feature = "schema", schemars(example = "127.0.0.1:8092"))]
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
    /// Models with limits of their own.
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Requests a tenant may send per minute.
    #[cfg_attr(feature = "schema", schemars(example = 600))]
    pub requests_per_minute: u64,
    /// Tokens (prompt and output) a tenant may use per minute.
    #[cfg_attr(feature = "schema", schemars(example = 100_000))]
    pub tokens_per_minute: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = Annotate(MODEL_LIMITS)))]
#[serde(deny_unknown_fields)]
pub struct ModelLimits {
    /// The `model` value clients send.
    #[cfg_attr(feature = "schema", schemars(example = "meta-llama/Llama-3.1-8B-Instruct"))]
    pub model: String,
    /// Requests a tenant may send per minute to this model.
    #[cfg_attr(feature = "schema", schemars(example = 60))]
    pub requests_per_minute: u64,
    /// Tokens a tenant may use per minute on this model.
    #[cfg_attr(feature = "schema", schemars(example = 20_000))]
    pub tokens_per_minute: u64,
}

/// How clusters are ranked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = Annotate(GLOBAL)))]
#[serde(deny_unknown_fields)]
pub struct GlobalSettings {
    /// The region this router is in: its clusters have no round trip to pay, come first
    /// among equally cheap ones, and are tried first when no cluster meets the target.
    #[cfg_attr(feature = "schema", schemars(example = "us-east"))]
    pub local_region: String,
    /// A cluster whose newest summary is two of its agent's intervals old is drained
    /// (the summary says its interval); this caps that wait, and is the limit for a
    /// summary that does not say.
    #[serde(default = "GlobalSettings::default_summary_max_age_ms")]
    pub summary_max_age_ms: u64,
    /// The class of a request without `x-infergate-class`.
    #[serde(default)]
    pub default_class: RequestClass,
    /// The predicted time to first token each class accepts.
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = Annotate(TARGETS)))]
#[serde(deny_unknown_fields)]
pub struct ClassTargets {
    /// A latency request's target, in milliseconds.
    #[serde(default = "ClassTargets::default_latency_ttft_ms")]
    pub latency_ttft_ms: f64,
    /// A batch request's target, in milliseconds.
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = Annotate(CLUSTER)))]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The name its agent sends in summaries (`metrics-agent run --cluster NAME`).
    #[cfg_attr(feature = "schema", schemars(example = &"east"))]
    pub name: String,
    /// The region it is in, compared with `global.local_region`.
    #[cfg_attr(feature = "schema", schemars(example = "us-east"))]
    pub region: String,
    /// The cluster's tier-1 gateway, `ip:port`.
    #[cfg_attr(feature = "schema", schemars(example = "10.0.1.10:8080"))]
    pub gateway: Endpoint,
    /// What serving a million tokens costs there (any currency, the same for all).
    #[cfg_attr(feature = "schema", schemars(example = 0.6))]
    pub cost_per_million_tokens: f64,
}

impl GlobalRouterConfig {
    /// Where the global router reads each request's tenant.
    pub fn tenant_source(&self) -> TenantSource {
        let fallback = self.rate_limits.as_ref().map_or("authorization", |limits| limits.tenant_header.as_str());
        self.identity.tenant_source(fallback)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let root = FieldPath::root();
        check_schema_version(self.version, &root)?;
        self.gateway.validate(&root.key("gateway"))?;
        let global = root.key("global");
        if self.global.local_region.trim().is_empty() {
            return Err(LOCAL_REGION.error(&global, format_args!("{:?}", self.global.local_region)));
        }
        SUMMARY_MAX_AGE_MS.check_integer(self.global.summary_max_age_ms, &global)?;
        CROSS_REGION_RTT_MS.check_number(self.global.cross_region_rtt_ms, &global)?;
        let targets = global.key("targets");
        LATENCY_TTFT_MS.check_number(self.global.targets.latency_ttft_ms, &targets)?;
        BATCH_TTFT_MS.check_number(self.global.targets.batch_ttft_ms, &targets)?;
        self.identity.validate(&root.key("identity"))?;
        if let Some(limits) = &self.rate_limits {
            let path = root.key("rate_limits");
            if limits.tenant_header.trim().is_empty() || limits.tenant_header.starts_with("x-infergate-") {
                return Err(RATE_LIMIT_TENANT_HEADER.error(&path, format_args!("{:?}", limits.tenant_header)));
            }
            if !limits.redis.starts_with("redis://") {
                return Err(REDIS.error(&path, format_args!("{:?}", limits.redis)));
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
            return Err(ConfigError::at(&clusters, format!("must have {}", CLUSTERS.rule)));
        }
        for (index, cluster) in self.clusters.iter().enumerate() {
            let path = clusters.index(index);
            if cluster.name.trim().is_empty() || cluster.name.len() > 128 {
                return Err(CLUSTER_NAME.error(&path, format_args!("{:?}", cluster.name)));
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
                return Err(CLUSTER_REGION.error(&path, format_args!("{:?}", cluster.region)));
            }
            COST_PER_MILLION_TOKENS.check_number(cluster.cost_per_million_tokens, &path)?;
        }
        Ok(())
    }
}

// What each checked field of `infergate-global.yaml` accepts (see `config::limits`).
const REGION: Rule = Rule::Text("a region name, not blank");
const CLUSTERS: Limit = Limit::new("clusters", Rule::Text("at least one cluster"));
#[cfg(feature = "schema")]
const GLOBAL_ROUTER: &[Limit] = &[VERSION, CLUSTERS];
const LOCAL_REGION: Limit = Limit::new("local_region", REGION);
const SUMMARY_MAX_AGE_MS: Limit = Limit::new("summary_max_age_ms", Rule::AtLeast(10));
const CROSS_REGION_RTT_MS: Limit = Limit::new("cross_region_rtt_ms", Rule::NonNegative);
#[cfg(feature = "schema")]
const GLOBAL: &[Limit] = &[LOCAL_REGION, SUMMARY_MAX_AGE_MS, CROSS_REGION_RTT_MS];
const LATENCY_TTFT_MS: Limit = Limit::new("latency_ttft_ms", Rule::Positive);
const BATCH_TTFT_MS: Limit = Limit::new("batch_ttft_ms", Rule::Positive);
#[cfg(feature = "schema")]
const TARGETS: &[Limit] = &[LATENCY_TTFT_MS, BATCH_TTFT_MS];
const CLUSTER_NAME: Limit = Limit::new("name", Rule::Text("1 to 128 bytes, not blank, unique among clusters"));
const CLUSTER_REGION: Limit = Limit::new("region", REGION);
#[cfg(feature = "schema")]
const CLUSTER_GATEWAY: Limit = Limit::new("gateway", Rule::Text("an `ip:port` that no other cluster has"));
const COST_PER_MILLION_TOKENS: Limit = Limit::new("cost_per_million_tokens", Rule::NonNegative);
#[cfg(feature = "schema")]
const CLUSTER: &[Limit] = &[CLUSTER_NAME, CLUSTER_REGION, CLUSTER_GATEWAY, COST_PER_MILLION_TOKENS];
const RATE_LIMIT_TENANT_HEADER: Limit =
    Limit::new("tenant_header", Rule::Text("a client header, not blank and outside `x-infergate-*`"));
const REDIS: Limit = Limit::new("redis", Rule::Text("a `redis://` URL"));
#[cfg(feature = "schema")]
const RATE_LIMITS: &[Limit] = &[RATE_LIMIT_TENANT_HEADER, REDIS];
#[cfg(feature = "schema")]
const MODEL_LIMITS: &[Limit] = &[Limit::new("model", Rule::Text("unique among `rate_limits.models`"))];

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
