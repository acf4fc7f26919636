//! Admission under overload: when every pod of a pool is saturated, sheddable requests
//! are refused at once (429 with `Retry-After`) so that the others do not queue behind
//! them; standard and critical requests are routed as usual and queue at the pod.

use serde::{Deserialize, Serialize};

#[cfg(feature = "schema")]
use super::limits;

/// How much a request may be refused to protect the others. Ordered from the first to
/// be shed to the last.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Criticality {
    /// Refused with 429 while its pool is saturated (batch jobs, evaluations).
    Sheddable,
    /// Routed whatever the load.
    #[default]
    Standard,
    /// Routed whatever the load; a client header cannot lower it below standard's
    /// treatment either, since only sheddable requests are ever refused.
    Critical,
}

impl Criticality {
    /// The `x-infergate-criticality` request header's value, if it names a level.
    pub fn from_header(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "sheddable" => Some(Self::Sheddable),
            "standard" => Some(Self::Standard),
            "critical" => Some(Self::Critical),
            _ => None,
        }
    }

    /// A client may lower its request's criticality, never raise it above the model's.
    pub fn effective(model: Self, requested: Option<Self>) -> Self {
        requested.map_or(model, |requested| requested.min(model))
    }
}

/// When a pool counts as saturated: every pod with fresh signals is at or over one of
/// these, and no pod lacks fresh signals (a pod the gateway cannot see might be idle).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::ADMISSION)))]
#[serde(deny_unknown_fields)]
pub struct AdmissionSettings {
    /// Waiting requests (including those this gateway sent since the scrape).
    #[serde(default = "AdmissionSettings::default_queue_depth_threshold")]
    pub queue_depth_threshold: f64,
    /// KV-cache use, 0 to 1.
    #[serde(default = "AdmissionSettings::default_kv_cache_threshold")]
    pub kv_cache_threshold: f64,
}

impl AdmissionSettings {
    fn default_queue_depth_threshold() -> f64 {
        5.0
    }
    fn default_kv_cache_threshold() -> f64 {
        0.8
    }
}

impl Default for AdmissionSettings {
    fn default() -> Self {
        Self {
            queue_depth_threshold: Self::default_queue_depth_threshold(),
            kv_cache_threshold: Self::default_kv_cache_threshold(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_can_lower_its_criticality_but_not_raise_it() {
        use Criticality::*;
        assert_eq!(Criticality::effective(Standard, Some(Sheddable)), Sheddable);
        assert_eq!(Criticality::effective(Sheddable, Some(Critical)), Sheddable);
        assert_eq!(Criticality::effective(Critical, None), Critical);
        assert_eq!(Criticality::from_header(" Sheddable "), Some(Sheddable));
        assert_eq!(Criticality::from_header("urgent"), None);
    }
}
