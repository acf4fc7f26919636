//! A cluster's summary, sent by its agent to the global router: per model, how much
//! ready capacity the cluster has and how soon it would start a new request.

use serde::{Deserialize, Serialize};

/// Bumped on any change a reader of the previous version would misread.
pub const SUMMARY_VERSION: u32 = 1;
/// Largest summary the control listener accepts.
pub const MAX_SUMMARY_BYTES: usize = 256 * 1024;
const MAX_MODELS: usize = 1024;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterSummary {
    pub version: u32,
    /// The cluster's name, as the global router's config lists it.
    pub cluster: String,
    /// Increases with every summary this cluster's agent builds.
    pub sequence: u64,
    /// Unix ms when the agent built it.
    pub created_at_ms: u64,
    /// How often the agent sends one, ms: a summary two intervals old is stale.
    #[serde(default)]
    pub interval_ms: u64,
    /// False when the agent's last push to its own gateway failed: the cluster's
    /// pods may be fine, but nothing reaches them.
    pub gateway_healthy: bool,
    pub models: Vec<ModelSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSummary {
    pub model: String,
    /// Pods that are ready and report fresh signals.
    pub ready_pods: u32,
    /// Requests waiting, summed over the pods of the model's pool that report it.
    pub waiting: f64,
    /// Requests running, summed likewise.
    pub running: f64,
    /// Mean KV-cache use of the ready pods that report it, 0..=1 (0 when none does).
    pub kv_cache_usage: f64,
    /// The tier-1 router's predicted time to first token of a typical request on the
    /// pool's best pod, in ms.
    pub predicted_ttft_ms: f64,
    /// That request's prefill time alone, in ms: what each further request sent before
    /// the next summary adds, spread over the ready pods.
    #[serde(default)]
    pub prefill_ms: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error("summary of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("summary is not valid MessagePack for this schema: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    #[error("summary version {found} is not supported; this build reads version {SUMMARY_VERSION}")]
    Version { found: u32 },
    #[error("summary has {count} models, more than the limit of {MAX_MODELS}")]
    TooManyModels { count: usize },
    #[error("summary cluster name must be 1 to 128 characters")]
    BadCluster,
    #[error("summary model {model:?} has a number that is not finite and non-negative")]
    BadNumber { model: String },
}

impl ClusterSummary {
    /// Older than two of its agent's intervals, or than `max_age_ms` if sooner: two
    /// summaries in a row went missing, so the cluster (or the way to it) is in doubt.
    pub fn is_stale(&self, now_ms: u64, max_age_ms: u64) -> bool {
        let limit = match self.interval_ms {
            0 => max_age_ms,
            interval => interval.saturating_mul(2).min(max_age_ms),
        };
        now_ms.saturating_sub(self.created_at_ms) > limit
    }

    pub fn encode(&self) -> Result<Vec<u8>, rmp_serde::encode::Error> {
        rmp_serde::to_vec_named(self)
    }

    /// Decodes and checks everything a ranking relies on.
    pub fn decode(bytes: &[u8]) -> Result<Self, SummaryError> {
        if bytes.len() > MAX_SUMMARY_BYTES {
            return Err(SummaryError::TooLarge { size: bytes.len(), limit: MAX_SUMMARY_BYTES });
        }
        let summary: ClusterSummary = rmp_serde::from_slice(bytes)?;
        if summary.version != SUMMARY_VERSION {
            return Err(SummaryError::Version { found: summary.version });
        }
        if summary.cluster.is_empty() || summary.cluster.len() > 128 {
            return Err(SummaryError::BadCluster);
        }
        if summary.models.len() > MAX_MODELS {
            return Err(SummaryError::TooManyModels { count: summary.models.len() });
        }
        for model in &summary.models {
            let numbers =
                [model.waiting, model.running, model.kv_cache_usage, model.predicted_ttft_ms, model.prefill_ms];
            if numbers.iter().any(|n| !n.is_finite() || *n < 0.0) {
                return Err(SummaryError::BadNumber { model: model.model.clone() });
            }
        }
        Ok(summary)
    }
}

/// Shared-data key of a cluster's newest summary on the global router.
pub fn summary_key(cluster: &str) -> String {
    format!("{}{cluster}", crate::wire::shared_data::SUMMARY_PREFIX)
}
