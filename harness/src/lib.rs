//! One whole gateway on loopback, for the end-to-end tests (`tests/`) and the
//! benchmarks that measure the real data path (`bench/`): a simulated fleet on real
//! sockets, real Envoy with the built filter, and the real metrics-agent binary.
//!
//! A crate of its own so that the benchmarks start the same stack as the tests without
//! depending on the test suite. Nothing is skipped: if Envoy, the `.wasm` or a binary
//! is missing, the caller fails and says which `make` target provides it.
#![forbid(unsafe_code)]

pub mod artifacts;
pub mod client;
pub mod engine_stack;
pub mod engines;
pub mod favoured;
pub mod fleet;
pub mod llamacpp;
pub mod peer_router;
pub mod picker;
pub mod procfs;
pub mod soak;
pub mod stack;
pub mod upload;

pub use client::{Reply, chat_body};
pub use stack::{BootstrapWriter, GatewayReplica, ModelSpec, PodShaper, Stack, StackSpec};
