//! The harness for end-to-end tests: the whole gateway on loopback from
//! `infergate-harness` (a simulated fleet on real sockets, real Envoy with the built
//! filter, the real metrics-agent binary), re-exported so that the tests name one crate,
//! and what only the tests use: the global router and its rate limiter, a fake
//! Kubernetes API server, listeners in a watched file, a real Prometheus, and a test
//! issuer of JSON Web Tokens.
//!
//! Nothing is skipped: if Envoy, the `.wasm` or a binary is missing, the test fails and
//! says which `make` target provides it.
#![forbid(unsafe_code)]

pub mod global_router;
pub mod jwt;
pub mod kube_api;
pub mod listener_file;
pub mod prometheus;

pub use infergate_harness::{BootstrapWriter, ModelSpec, Reply, Stack, StackSpec, chat_body};
pub use infergate_harness::{artifacts, client, engine_stack, engines, favoured, fleet, procfs, soak, stack, upload};
