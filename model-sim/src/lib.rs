//! model-sim: OpenAI-compatible model servers that behave like vLLM under load, so
//! that routing can be demonstrated and tested without GPUs.
//!
//! The engine is a library; the HTTP fleet is a thin user of it.
#![forbid(unsafe_code)]

pub mod api;
pub mod engine;
pub mod fleet;
pub mod metrics_text;
pub mod pinned;

/// Every response names the pod that served it, so clients and tests can see routing.
pub const SERVED_BY_HEADER: &str = "x-infergate-served-by";
