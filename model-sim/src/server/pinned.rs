//! Metrics a test or an operator pins on a pod, overriding what the engine reports, so
//! that a routing choice can be steered and checked.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedMetrics {
    pub waiting: Option<f64>,
    pub running: Option<f64>,
    pub kv_cache_usage: Option<f64>,
    pub running_lora_adapters: Option<Vec<String>>,
    pub waiting_lora_adapters: Option<Vec<String>>,
}
