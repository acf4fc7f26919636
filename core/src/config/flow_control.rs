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

/// Per-band bounds and release rules.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Bands {
    #[serde(default = "Bands::default_critical")]
    pub critical: BandSettings,
    #[serde(default = "Bands::default_standard")]
    pub standard: BandSettings,
    #[serde(default = "Bands::default_sheddable")]
    pub sheddable: BandSettings,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct BandSettings {
    /// Longest time a request of this band is held; then it is answered 503 (429 for
    /// sheddable) with `Retry-After`.
    pub max_wait_ms: u64,
    /// Also hold a request while the best pod's predicted time to first token is above
    /// this, even if the pool is not saturated; `null`: hold only while saturated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_above_ttft_ms: Option<f64>,
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

    pub fn band(&self, band: Criticality) -> &BandSettings {
        match band {
            Criticality::Critical => &self.bands.critical,
            Criticality::Standard => &self.bands.standard,
            Criticality::Sheddable => &self.bands.sheddable,
        }
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
            ("critical", &self.bands.critical),
            ("standard", &self.bands.standard),
            ("sheddable", &self.bands.sheddable),
        ] {
            let here = bands.key(name);
            if !(1..=3_600_000).contains(&band.max_wait_ms) {
                return Err(ConfigError::at(
                    &here.key("max_wait_ms"),
                    format!("must be between 1 and 3600000 (one hour), got {}", band.max_wait_ms),
                ));
            }
            if let Some(ttft) = band.hold_above_ttft_ms {
                if !(ttft.is_finite() && ttft > 0.0) {
                    return Err(ConfigError::at(
                        &here.key("hold_above_ttft_ms"),
                        format!("must be a finite number of milliseconds > 0, or null; got {ttft}"),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Bands {
    fn default_critical() -> BandSettings {
        BandSettings { max_wait_ms: 60_000, hold_above_ttft_ms: None }
    }
    fn default_standard() -> BandSettings {
        BandSettings { max_wait_ms: 30_000, hold_above_ttft_ms: None }
    }
    fn default_sheddable() -> BandSettings {
        BandSettings { max_wait_ms: 10_000, hold_above_ttft_ms: None }
    }
}

impl Default for Bands {
    fn default() -> Self {
        Self {
            critical: Self::default_critical(),
            standard: Self::default_standard(),
            sheddable: Self::default_sheddable(),
        }
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
