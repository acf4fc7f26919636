//! Flow control: the gateway queue that holds requests a saturated pool would only
//! queue at its engines, and the order it releases them in (priority band first, then
//! fairness among tenants, then first come or earliest deadline within a tenant).

use serde::{Deserialize, Serialize};

use super::admission::Criticality;
use super::error::{ConfigError, FieldPath};

/// `flow_control:` in `infergate.yaml`. Off by default: without it a saturated pool
/// sheds sheddable requests at once and routes the rest to queue at the engines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FlowControlSettings {
    /// Hold requests in the gateway while their pool is saturated.
    #[serde(default)]
    pub enabled: bool,
    /// The request header that names the tenant; requests without it share one
    /// anonymous tenant. Its value is read, never logged.
    #[serde(default = "FlowControlSettings::default_tenant_header")]
    pub tenant_header: String,
    /// How a band shares dispatches among its tenants.
    #[serde(default)]
    pub fairness: Fairness,
    /// The order of one tenant's requests.
    #[serde(default)]
    pub order: QueueOrder,
    /// Requests held per pool at most, all bands together; a request that finds the
    /// queue full displaces a lower band's newest, or the newest of a tenant holding
    /// more, or is refused.
    #[serde(default = "FlowControlSettings::default_max_queued")]
    pub max_queued: u32,
    #[serde(default)]
    pub bands: Bands,
}

/// Per-band bounds and release rules; what a band leaves unset takes its default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Bands {
    /// Defaults: 60 s, 4 waiting.
    #[serde(default)]
    pub critical: BandSettings,
    /// Defaults: 30 s, 1 waiting.
    #[serde(default)]
    pub standard: BandSettings,
    /// Defaults: 10 s, 1 waiting.
    #[serde(default)]
    pub sheddable: BandSettings,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct BandSettings {
    /// Longest time a request of this band is held; then it is answered 503 (429 for
    /// sheddable) with `Retry-After`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wait_ms: Option<u64>,
    /// A request of this band is released only to a pod with fewer requests than this
    /// waiting at its engine (as last scraped, plus those this gateway sent since) and
    /// KV-cache use below `routing.admission.kv_cache_threshold`. Low keeps the
    /// engines' queues short, so that the gateway's order decides who goes next; a
    /// higher band's higher limit keeps room at the engines that only it may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_engine_waiting: Option<f64>,
    /// Also hold a request while the best pod's predicted time to first token is above
    /// this, even if a pod has room; unset: no such limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_above_ttft_ms: Option<f64>,
}

/// A band's settings with its defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BandLimits {
    pub max_wait_ms: u64,
    pub max_engine_waiting: f64,
    pub hold_above_ttft_ms: Option<f64>,
}

impl BandLimits {
    fn default_for(band: Criticality) -> Self {
        let (max_wait_ms, max_engine_waiting) = match band {
            Criticality::Critical => (60_000, 4.0),
            Criticality::Standard => (30_000, 1.0),
            Criticality::Sheddable => (10_000, 1.0),
        };
        Self { max_wait_ms, max_engine_waiting, hold_above_ttft_ms: None }
    }
}

/// Which tenant of a band is served next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Fairness {
    /// The tenant that has had the fewest tokens (prompt plus expected output)
    /// dispatched since it started queueing: a tenant of long prompts gets fewer
    /// requests through than one of short prompts.
    #[default]
    AttainedService,
    /// Tenants take turns, one request each.
    RoundRobin,
}

/// Which of a tenant's held requests goes first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum QueueOrder {
    /// The one whose deadline comes first: arrival plus its `x-infergate-ttft-target-ms`
    /// header, or plus its band's `max_wait_ms` without one.
    #[default]
    EarliestDeadline,
    /// The one that arrived first.
    FirstCome,
}

impl FlowControlSettings {
    fn default_tenant_header() -> String {
        "x-tenant-id".to_string()
    }
    fn default_max_queued() -> u32 {
        1024
    }

    /// The band's settings, defaults filled in.
    pub fn band(&self, band: Criticality) -> BandLimits {
        let set = match band {
            Criticality::Critical => &self.bands.critical,
            Criticality::Standard => &self.bands.standard,
            Criticality::Sheddable => &self.bands.sheddable,
        };
        let default = BandLimits::default_for(band);
        BandLimits {
            max_wait_ms: set.max_wait_ms.unwrap_or(default.max_wait_ms),
            max_engine_waiting: set.max_engine_waiting.unwrap_or(default.max_engine_waiting),
            hold_above_ttft_ms: set.hold_above_ttft_ms.or(default.hold_above_ttft_ms),
        }
    }

    /// The checks of the file's `flow_control:`, for settings built in code.
    pub fn validate_standalone(&self) -> Result<(), ConfigError> {
        self.validate(&FieldPath::root().key("flow_control"))
    }

    pub(crate) fn validate(&self, at: &FieldPath) -> Result<(), ConfigError> {
        let header = self.tenant_header.as_str();
        let is_token = !header.is_empty()
            && header.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !is_token || header.starts_with("x-infergate-") || header.starts_with(':') {
            return Err(ConfigError::at(
                &at.key("tenant_header"),
                format!(
                    "must be a lower-case header name (letters, digits, `-`, `_`) outside `x-infergate-*`, got `{header}`"
                ),
            ));
        }
        if !(1..=65_536).contains(&self.max_queued) {
            return Err(ConfigError::at(
                &at.key("max_queued"),
                format!("must be between 1 and 65536, got {}", self.max_queued),
            ));
        }
        let bands = at.key("bands");
        for (name, band) in [
            ("critical", Criticality::Critical),
            ("standard", Criticality::Standard),
            ("sheddable", Criticality::Sheddable),
        ] {
            let here = bands.key(name);
            let band = self.band(band);
            if !(1..=3_600_000).contains(&band.max_wait_ms) {
                return Err(ConfigError::at(
                    &here.key("max_wait_ms"),
                    format!("must be between 1 and 3600000 (one hour), got {}", band.max_wait_ms),
                ));
            }
            if !(band.max_engine_waiting.is_finite() && band.max_engine_waiting > 0.0) {
                return Err(ConfigError::at(
                    &here.key("max_engine_waiting"),
                    format!("must be a number of requests > 0, got {}", band.max_engine_waiting),
                ));
            }
            if let Some(ttft) = band.hold_above_ttft_ms {
                if !(ttft.is_finite() && ttft > 0.0) {
                    return Err(ConfigError::at(
                        &here.key("hold_above_ttft_ms"),
                        format!("must be a finite number of milliseconds > 0, or unset; got {ttft}"),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Default for FlowControlSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            tenant_header: Self::default_tenant_header(),
            fairness: Fairness::default(),
            order: QueueOrder::default(),
            max_queued: Self::default_max_queued(),
            bands: Bands::default(),
        }
    }
}
