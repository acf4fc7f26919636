//! Values in Envoy's shared data that two roles, or the workers of one, agree on,
//! each with its codec: the two-word counters, the generation counters, the pods' loads,
//! the clusters' summaries, the other replicas' pushed load, the newest prefix records.

pub mod generation;
pub mod peer_load;
pub mod pod_loads;
pub mod recent_prefixes;
pub mod summaries;
pub mod words;
