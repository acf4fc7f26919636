//! The plain-Rust brain of infergate.
//!
//! Everything that decides where a request goes lives here, free of any proxy-wasm
//! dependency, so that it is unit-tested natively, compiled into the Envoy filter, and
//! run unchanged by the benchmark. The filter is a thin shell that moves bytes between
//! Envoy and these types.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

pub mod api_error;
pub mod config;
pub mod control;
pub mod endpoint;
pub mod filter_config;
pub mod flow;
pub mod global;
pub mod prefix;
pub mod replicas;
pub mod request;
pub mod router;
pub mod scoring;
pub mod snapshot;
pub mod usage;
pub mod wire;

pub use api_error::ApiError;
pub use endpoint::Endpoint;
