//! What each checked field accepts, written once: `validate` enforces these limits and
//! the configuration reference (`docs/configuration.md`) prints them, so the two cannot
//! disagree. A type's limits are listed in one slice per type; with the `schema`
//! feature, [`Annotate`] copies them into that type's JSON Schema, where the reference
//! generator finds them next to each field's type, default and doc comment.

use std::fmt;

use super::error::{ConfigError, FieldPath};

/// What a field accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    /// Exactly this integer.
    Exactly(u64),
    /// An integer from the first to the second, both included.
    Between(u64, u64),
    /// An integer of at least this.
    AtLeast(u64),
    /// A finite number greater than 0.
    Positive,
    /// A finite number, 0 or more.
    NonNegative,
    /// A number greater than 0 and at most 1.
    Fraction,
    /// A rule that is not a range, in words; its check is written where it is enforced.
    Text(&'static str),
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Exactly(value) => write!(f, "{value}"),
            Rule::Between(low, high) => write!(f, "between {low} and {high}"),
            Rule::AtLeast(low) => write!(f, "at least {low}"),
            Rule::Positive => f.write_str("a finite number > 0"),
            Rule::NonNegative => f.write_str("a finite number >= 0"),
            Rule::Fraction => f.write_str("in (0, 1]"),
            Rule::Text(text) => f.write_str(text),
        }
    }
}

impl Rule {
    /// Whether an integer field's value passes; a [`Rule::Text`] is checked elsewhere.
    pub fn admits_integer(&self, value: u64) -> bool {
        match *self {
            Rule::Exactly(expected) => value == expected,
            Rule::Between(low, high) => (low..=high).contains(&value),
            Rule::AtLeast(low) => value >= low,
            Rule::Positive => value > 0,
            Rule::NonNegative | Rule::Text(_) => true,
            Rule::Fraction => value == 1,
        }
    }

    /// Whether a number field's value passes; a [`Rule::Text`] is checked elsewhere.
    pub fn admits_number(&self, value: f64) -> bool {
        if !value.is_finite() {
            return matches!(self, Rule::Text(_));
        }
        match *self {
            Rule::Exactly(expected) => value == expected as f64,
            Rule::Between(low, high) => value >= low as f64 && value <= high as f64,
            Rule::AtLeast(low) => value >= low as f64,
            Rule::Positive => value > 0.0,
            Rule::NonNegative => value >= 0.0,
            Rule::Fraction => value > 0.0 && value <= 1.0,
            Rule::Text(_) => true,
        }
    }
}

/// The rule of one field, named by its key in the type that holds it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    pub key: &'static str,
    pub rule: Rule,
}

impl Limit {
    pub const fn new(key: &'static str, rule: Rule) -> Self {
        Self { key, rule }
    }

    /// The error for a value this limit refuses, at `at.<key>`.
    pub fn error(&self, at: &FieldPath, got: impl fmt::Display) -> ConfigError {
        ConfigError::at(&at.key(self.key), format!("must be {}, got {got}", self.rule))
    }

    /// Checks an integer field of the type found at `at`.
    pub fn check_integer(&self, value: u64, at: &FieldPath) -> Result<(), ConfigError> {
        if self.rule.admits_integer(value) { Ok(()) } else { Err(self.error(at, value)) }
    }

    /// Checks a number field of the type found at `at`.
    pub fn check_number(&self, value: f64, at: &FieldPath) -> Result<(), ConfigError> {
        if self.rule.admits_number(value) { Ok(()) } else { Err(self.error(at, value)) }
    }
}

// `gateway:` (GatewaySettings), in both config files.
pub const MAX_BODY_BYTES: Limit = Limit::new("max_body_bytes", Rule::Between(1024, 1 << 30));
pub const REQUEST_TIMEOUT_MS: Limit = Limit::new("request_timeout_ms", Rule::AtLeast(1));
pub const GATEWAY: &[Limit] = &[MAX_BODY_BYTES, REQUEST_TIMEOUT_MS];

// `agent:` (AgentSettings).
pub const SCRAPE_INTERVAL_MS: Limit = Limit::new("scrape_interval_ms", Rule::AtLeast(10));
/// The largest scrape timeout, in scrape intervals.
pub const SCRAPE_TIMEOUT_INTERVALS: u64 = 10;
pub const SCRAPE_TIMEOUT_MS: Limit =
    Limit::new("scrape_timeout_ms", Rule::Text("greater than 0 and at most 10 scrape intervals"));
pub const AGENT: &[Limit] = &[SCRAPE_INTERVAL_MS, SCRAPE_TIMEOUT_MS];

// The top of each config file.
pub const VERSION: Limit = Limit::new("version", Rule::Exactly(super::SCHEMA_VERSION as u64));
pub const POOLS: Limit = Limit::new("pools", Rule::Text("at least one pool"));
pub const MODELS: Limit = Limit::new("models", Rule::Text("at least one model"));
pub const INFERGATE: &[Limit] = &[VERSION, POOLS, MODELS];

// `routing:` (RoutingSettings).
pub const WEIGHTS_NOT_ALL_ZERO: Limit = Limit::new("weights", Rule::Text("at least one weight greater than 0"));
pub const KV_CACHE_THRESHOLD: Limit = Limit::new("kv_cache_threshold", Rule::Fraction);
pub const RANKED_ENDPOINTS: Limit = Limit::new("ranked_endpoints", Rule::Between(1, 16));
pub const SIGNAL_MAX_AGE_MS: Limit = Limit::new("signal_max_age_ms", Rule::AtLeast(1));
pub const ROUTING: &[Limit] = &[WEIGHTS_NOT_ALL_ZERO, KV_CACHE_THRESHOLD, RANKED_ENDPOINTS, SIGNAL_MAX_AGE_MS];

// `weights:` (Weights), under `routing` and each pool: every weight is checked alike.
pub const WEIGHT: Rule = Rule::NonNegative;
pub const WEIGHTS: &[Limit] = &[
    Limit::new("kv_cache", WEIGHT),
    Limit::new("queue_depth", WEIGHT),
    Limit::new("running_requests", WEIGHT),
    Limit::new("lora_affinity", WEIGHT),
    Limit::new("prefix_cache", WEIGHT),
];

// `routing.admission:` (AdmissionSettings).
pub const QUEUE_DEPTH_THRESHOLD: Limit = Limit::new("queue_depth_threshold", Rule::NonNegative);
pub const ADMISSION_KV_CACHE_THRESHOLD: Limit = Limit::new("kv_cache_threshold", Rule::Fraction);
pub const ADMISSION: &[Limit] = &[QUEUE_DEPTH_THRESHOLD, ADMISSION_KV_CACHE_THRESHOLD];

// `routing.prefix:` (PrefixSettings).
pub const BLOCK_CHARS: Limit = Limit::new("block_chars", Rule::Between(4, 65_536));
pub const MAX_BLOCKS: Limit = Limit::new("max_blocks", Rule::Between(1, 1 << 24));
pub const MAX_OWNERS: Limit = Limit::new("max_owners", Rule::Between(1, 4_096));
pub const DEFAULT_BLOCKS_PER_POD: Limit = Limit::new("default_blocks_per_pod", Rule::Between(1, 10_000_000));
pub const PREFIX: &[Limit] = &[BLOCK_CHARS, MAX_BLOCKS, MAX_OWNERS, DEFAULT_BLOCKS_PER_POD];

// `routing.cost:` (CostDefaults).
pub const PREFILL_TOKENS_PER_S: Limit = Limit::new("prefill_tokens_per_s", Rule::Positive);
pub const DECODE_STEP_MS: Limit = Limit::new("decode_step_ms", Rule::Positive);
pub const MEAN_PROMPT_TOKENS: Limit = Limit::new("mean_prompt_tokens", Rule::Positive);
pub const OUTPUT_TOKENS: Limit = Limit::new("output_tokens", Rule::Positive);
pub const LORA_LOAD_MS: Limit = Limit::new("lora_load_ms", Rule::NonNegative);
pub const UNKNOWN_POD_PENALTY_MS: Limit = Limit::new("unknown_pod_penalty_ms", Rule::NonNegative);
pub const ATTENTION_CROSSOVER_TOKENS: Limit = Limit::new("attention_crossover_tokens", Rule::NonNegative);
pub const COST: &[Limit] = &[
    PREFILL_TOKENS_PER_S,
    DECODE_STEP_MS,
    MEAN_PROMPT_TOKENS,
    OUTPUT_TOKENS,
    LORA_LOAD_MS,
    UNKNOWN_POD_PENALTY_MS,
    ATTENTION_CROSSOVER_TOKENS,
];

// `flow_control:` (FlowControlSettings) and each of its bands (BandSettings).
pub const TENANT_HEADER: Limit = Limit::new(
    "tenant_header",
    Rule::Text("a lower-case header name (letters, digits, `-`, `_`) outside `x-infergate-*`"),
);
pub const MAX_QUEUED: Limit = Limit::new("max_queued", Rule::Between(1, 65_536));
pub const MAX_TENANTS: Limit = Limit::new("max_tenants", Rule::Between(1, 65_536));
pub const FLOW_CONTROL: &[Limit] = &[TENANT_HEADER, MAX_QUEUED, MAX_TENANTS];

// `identity:` (IdentitySettings) and its `jwt` (JwtSettings).
pub const IDENTITY_HEADER: Limit =
    Limit::new("header", Rule::Text("a lower-case header name (letters, digits, `-`, `_`) outside `x-infergate-*`"));
pub const IDENTITY: &[Limit] = &[IDENTITY_HEADER];
pub const ISSUER: Limit = Limit::new("issuer", Rule::Text("not blank"));
pub const JWKS_URI: Limit = Limit::new("jwks_uri", Rule::Text("an `http://` or `https://` URI"));
pub const CLAIM: Limit = Limit::new("claim", Rule::Text("not blank"));
pub const JWT: &[Limit] = &[ISSUER, JWKS_URI, CLAIM];

/// A header name as the config may name one: lower case letters, digits, `-` and `_`,
/// not a pseudo-header.
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}
pub const MAX_WAIT_MS: Limit = Limit::new("max_wait_ms", Rule::Between(1, 3_600_000));
pub const MAX_ENGINE_WAITING: Limit = Limit::new("max_engine_waiting", Rule::Positive);
pub const HOLD_ABOVE_TTFT_MS: Limit = Limit::new("hold_above_ttft_ms", Rule::Positive);
pub const BAND: &[Limit] = &[MAX_WAIT_MS, MAX_ENGINE_WAITING, HOLD_ABOVE_TTFT_MS];

// `pools[]` (PoolConfig), its `discovery` and `models[]` (ModelConfig).
pub const POOL_NAME: Limit = Limit::new(
    "name",
    Rule::Text("1 to 63 lower-case letters, digits and `-`, not `-` at either end; unique among pools"),
);
pub const POOL_ENDPOINTS: Limit = Limit::new(
    "endpoints",
    Rule::Text("at least one endpoint, unless the pool has a `discovery` source; no duplicates"),
);
pub const METRICS_PATH: Limit = Limit::new("metrics_path", Rule::Text("a URL path starting with '/', without spaces"));
pub const POOL_DISCOVERY: Limit = Limit::new("discovery", Rule::Text("exactly one of `pods` and `inference_pool`"));
pub const POOL: &[Limit] = &[POOL_NAME, POOL_ENDPOINTS, METRICS_PATH, POOL_DISCOVERY, WEIGHTS_NOT_ALL_ZERO];
// `pools[].disaggregation` (Disaggregation).
pub const KV_BYTES_PER_TOKEN: Limit = Limit::new("kv_bytes_per_token", Rule::AtLeast(1));
pub const TRANSFER_GB_PER_S: Limit = Limit::new("transfer_gb_per_s", Rule::Positive);
pub const PREFILL_TIMEOUT_MS: Limit = Limit::new("prefill_timeout_ms", Rule::AtLeast(1));
pub const TTFT_TARGET_MS: Limit = Limit::new("ttft_target_ms", Rule::AtLeast(1));
pub const ITL_TARGET_MS: Limit = Limit::new("itl_target_ms", Rule::AtLeast(1));
pub const ROLE_LABEL: Limit = Limit::new("role_label", Rule::Text("a Kubernetes label key"));
pub const ROLE_ENDPOINTS: Rule =
    Rule::Text("endpoints of the pool's `endpoints`, none in both `prefill_endpoints` and `decode_endpoints`");
pub const DISAGGREGATION: &[Limit] = &[
    KV_BYTES_PER_TOKEN,
    TRANSFER_GB_PER_S,
    PREFILL_TIMEOUT_MS,
    TTFT_TARGET_MS,
    ITL_TARGET_MS,
    ROLE_LABEL,
    Limit::new("prefill_endpoints", ROLE_ENDPOINTS),
    Limit::new("decode_endpoints", ROLE_ENDPOINTS),
];
pub const K8S_NAME: Rule = Rule::Text("a Kubernetes name (RFC 1123 label: 1 to 63 lower-case letters, digits and `-`)");
pub const POD_SELECTOR: &[Limit] = &[
    Limit::new("namespace", K8S_NAME),
    Limit::new("match_labels", Rule::Text("at least one label; valid Kubernetes label keys and values")),
    Limit::new("target_ports", Rule::Text("1 to 8 ports, none of them 0")),
];
pub const INFERENCE_POOL_REF: &[Limit] = &[Limit::new("namespace", K8S_NAME), Limit::new("name", K8S_NAME)];
pub const MODEL_NAME: Rule = Rule::Text("1 to 256 bytes, without control characters or white space at either end");
pub const MODEL: &[Limit] = &[
    Limit::new("name", MODEL_NAME),
    Limit::new("pool", Rule::Text("the `name` of one of `pools`")),
    Limit::new("adapter", MODEL_NAME),
];

/// Copies a type's limits into its JSON Schema, as `x-infergate-allowed` on each
/// field: `#[schemars(transform = Annotate(limits::GATEWAY))]`.
#[cfg(feature = "schema")]
pub struct Annotate(pub &'static [Limit]);

/// The JSON Schema key that carries a field's rule in words.
#[cfg(feature = "schema")]
pub const ALLOWED_KEY: &str = "x-infergate-allowed";

#[cfg(feature = "schema")]
impl schemars::transform::Transform for Annotate {
    fn transform(&mut self, schema: &mut schemars::Schema) {
        for limit in self.0 {
            let property = schema
                .get_mut("properties")
                .and_then(|properties| properties.get_mut(limit.key))
                .and_then(serde_json::Value::as_object_mut);
            match property {
                Some(property) => {
                    property.insert(ALLOWED_KEY.into(), limit.rule.to_string().into());
                }
                // The reference generator refuses a schema that carries this.
                None => {
                    schema.insert(format!("x-infergate-unknown-limit-{}", limit.key), true.into());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_in_words_name_the_constants_their_checks_use() {
        let model_name = MODEL_NAME.to_string();
        assert!(model_name.contains(&format!("1 to {} bytes", super::super::MAX_MODEL_NAME_BYTES)), "{model_name}");
        let timeout = SCRAPE_TIMEOUT_MS.rule.to_string();
        assert!(timeout.contains(&format!("at most {SCRAPE_TIMEOUT_INTERVALS} scrape intervals")), "{timeout}");
    }

    #[test]
    fn a_refused_value_is_reported_at_its_field_with_the_rule() {
        let at = FieldPath::root().key("routing");
        let error = RANKED_ENDPOINTS.check_integer(17, &at).unwrap_err();
        assert_eq!(
            (error.path.as_str(), error.message.as_str()),
            ("routing.ranked_endpoints", "must be between 1 and 16, got 17")
        );
        assert!(KV_CACHE_THRESHOLD.check_number(f64::NAN, &at).is_err());
        assert!(KV_CACHE_THRESHOLD.check_number(1.0, &at).is_ok());
    }
}
