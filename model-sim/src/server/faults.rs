//! Faults a pod can be told to show, from flags or `POST /admin/faults`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    /// Added before a request reaches the engine.
    #[serde(default)]
    pub added_latency_ms: u64,
    /// Fraction of inference requests answered with `error_status`, 0..=1.
    #[serde(default)]
    pub error_rate: f64,
    /// 500, 503 or 429.
    #[serde(default = "Faults::default_error_status")]
    pub error_status: u16,
    /// Accept inference requests and never answer them.
    #[serde(default)]
    pub hang: bool,
    /// Keep serving the `/metrics` text of the moment this was set: stale values.
    #[serde(default)]
    pub freeze_metrics: bool,
}

impl Faults {
    fn default_error_status() -> u16 {
        503
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.error_rate) {
            return Err(format!("error_rate must be within 0..=1, got {}", self.error_rate));
        }
        if ![429, 500, 503].contains(&self.error_status) {
            return Err(format!("error_status must be 429, 500 or 503, got {}", self.error_status));
        }
        Ok(())
    }
}
