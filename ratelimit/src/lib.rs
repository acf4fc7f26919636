//! The global router's rate limit service. Envoy's rate limit filter asks it, per
//! request, over Envoy's gRPC rate limit API (`envoy.service.ratelimit.v3`); it counts
//! requests and tokens per tenant and model in fixed one-minute windows in Redis, so
//! every replica of it and of the global router shares the same counts. The global
//! router's filter later reports each answer's real token use to `POST /v1/usage`,
//! which corrects the admission-time estimate.
#![forbid(unsafe_code)]

pub mod charge;
pub mod counter;
pub mod service;
pub mod usage;

/// The rate limit domain the global router's filter config uses.
pub const DOMAIN: &str = "infergate";
