//! Tier 2: the global router in front of several clusters' gateways. Each cluster's
//! agent sends a summary of its pools; the global router ranks the clusters for each
//! request (region, cost, predicted time to first token, health) and names their
//! gateways best first, as tier 1 names pods. The same filter does it, in another role.

mod config;
pub mod metering;
mod rank;
mod summarize;
mod summary;

pub use config::{
    ClassTargets, ClusterConfig, GlobalRouterConfig, GlobalSettings, Limits, ModelLimits, RateLimits, RequestClass,
};
pub use rank::{ClusterChoice, ClusterState, GlobalDecision, rank_clusters};
pub use summarize::summarize;
pub use summary::{ClusterSummary, MAX_SUMMARY_BYTES, ModelSummary, SUMMARY_VERSION, SummaryError, summary_key};

#[cfg(test)]
mod tests;
