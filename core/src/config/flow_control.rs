//! Flow control: the gateway queue that holds requests a saturated pool would only
//! queue at its engines, and the order it releases them in (priority band first, then
//! fairness among tenants, then first come or earliest deadline within a tenant).

use serde::{Deserialize, Serialize};

use super::admission::Criticality;
use super::error::{ConfigError, FieldPath};
use super::limits;

/// The gateway queue, read by the filter. Off by default: without it a saturated pool
/// sheds sheddable requests at once and routes the rest to queue at the engines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::FLOW_CONTROL)))]
#[serde(deny_unknown_fields)]
pub struct FlowControlSettings {
    /// Hold requests in the gateway while their pool is saturated.
    #[cfg_attr(feature = "schema", schemars(example = true))]
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
    /// Requests held per pool at most, all bands and all of an Envoy's workers
    /// together; a request that finds the queue full displaces a lower band's newest,
    /// or the newest of a tenant holding more, or is refused.
    #[serde(default = "FlowControlSettings::default_max_queued")]
    pub max_queued: u32,
    /// Tenants tracked per pool and band at most. A request of a tenant beyond the
    /// bound (once no tenant without held requests is left to forget) joins the
    /// anonymous tenant, so the queue's state stays bounded whatever tenant ids
    /// clients send.
    #[serde(default = "FlowControlSettings::default_max_tenants")]
    pub max_tenants: u32,
    /// The three priority bands, highest first.
    #[serde(default)]
    pub bands: Bands,
}

/// Per-band bounds and release rules; what a band leaves unset takes its default.
/// A request's band is its model's `criticality`, as lowered by its
/// `x-infergate-criticality` header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = band_defaults))]
#[serde(deny_unknown_fields)]
pub struct Bands {
    /// The band of critical models: served first, held longest.
    #[serde(default)]
    pub critical: BandSettings,
    /// The band of standard models (the default criticality).
    #[serde(default)]
    pub standard: BandSettings,
    /// The band of sheddable models: served last, held shortest.
    #[serde(default)]
    pub sheddable: BandSettings,
}

/// Writes each band's defaults ([`BandLimits::default_for`]) into its fields' schemas,
/// since serde leaves them unset and [`FlowControlSettings::band`] fills them in.
#[cfg(feature = "schema")]
fn band_defaults(schema: &mut schemars::Schema) {
    for (name, band) in [
        ("critical", Criticality::Critical),
        ("standard", Criticality::Standard),
        ("sheddable", Criticality::Sheddable),
    ] {
        let limits = BandLimits::default_for(band);
        let fields = schema
            .get_mut("properties")
            .and_then(|bands| bands.get_mut(name))
            .and_then(|band| band.get_mut("properties"))
            .and_then(serde_json::Value::as_object_mut);
        let Some(fields) = fields else { continue };
        for (key, value) in [
            ("max_wait_ms", serde_json::json!(limits.max_wait_ms)),
            ("max_engine_waiting", serde_json::json!(limits.max_engine_waiting)),
        ] {
            if let Some(field) = fields.get_mut(key).and_then(serde_json::Value::as_object_mut) {
                field.insert("default".into(), value);
            }
        }
    }
}

/// How long one band's requests may be held, and when they are released.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::BAND)))]
#[serde(deny_unknown_fields)]
pub struct BandSettings {
    /// Longest time a request of this band is held, in milliseconds; then it is
    /// answered 503 (429 for sheddable) with `Retry-After`.
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
    #[cfg_attr(feature = "schema", schemars(example = 2000.0))]
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
    fn default_max_tenants() -> u32 {
        128
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
        if !limits::is_header_name(header) || header.starts_with("x-infergate-") {
            return Err(limits::TENANT_HEADER.error(at, format_args!("`{header}`")));
        }
        limits::MAX_QUEUED.check_integer(u64::from(self.max_queued), at)?;
        limits::MAX_TENANTS.check_integer(u64::from(self.max_tenants), at)?;
        let bands = at.key("bands");
        for (name, band) in [
            ("critical", Criticality::Critical),
            ("standard", Criticality::Standard),
            ("sheddable", Criticality::Sheddable),
        ] {
            let here = bands.key(name);
            let band = self.band(band);
            limits::MAX_WAIT_MS.check_integer(band.max_wait_ms, &here)?;
            limits::MAX_ENGINE_WAITING.check_number(band.max_engine_waiting, &here)?;
            if let Some(ttft) = band.hold_above_ttft_ms {
                limits::HOLD_ABOVE_TTFT_MS.check_number(ttft, &here)?;
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
            max_tenants: Self::default_max_tenants(),
            bands: Bands::default(),
        }
    }
}
