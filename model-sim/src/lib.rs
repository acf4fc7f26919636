//! model-sim: OpenAI-compatible model servers that behave like vLLM under load, so
//! that routing can be demonstrated, tested and benchmarked without GPUs.
//!
//! [`engine`] is the model of one pod in virtual time; the discrete-event benchmark
//! drives it directly. [`server`] serves the same engine over HTTP in scaled real time,
//! so the two can never disagree.
#![forbid(unsafe_code)]

pub mod engine;
pub mod server;
