//! The harness for end-to-end tests: a simulated fleet on real sockets, real Envoy
//! with the built filter, and the real metrics-agent binary.
//!
//! Nothing is skipped: if Envoy, the `.wasm` or a binary is missing, the test fails and
//! says which `make` target provides it.
#![forbid(unsafe_code)]

pub mod artifacts;
pub mod client;
pub mod fleet;
pub mod global_router;
pub mod kube_api;
pub mod listener_file;
pub mod procfs;
pub mod soak;
pub mod stack;

pub use client::{Reply, chat_body};
pub use stack::{BootstrapWriter, ModelSpec, Stack, StackSpec};
