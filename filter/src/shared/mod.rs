//! Values in Envoy's shared data that two roles, or the workers of one, agree on,
//! each with its codec: the two-word counters, the generation counters, the clusters'
//! summaries, the other replicas' pushed load.

pub mod generation;
pub mod peer_load;
pub mod summaries;
pub mod words;
