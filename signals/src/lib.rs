//! The signals infergate reads from model servers: the Prometheus exposition parser,
//! the engine adapters (vLLM, SGLang, TensorRT-LLM, llama.cpp, ...) and the rate
//! learner.
//!
//! A crate of its own because more than the agent reads them: pure functions of a
//! scrape's text, with no I/O, that the metrics agent runs on every scrape, the
//! benchmark runs on the simulator's `/metrics`, the simulator's tests check its output
//! with, and the fuzz targets build alone.
#![forbid(unsafe_code)]

pub mod engines;
pub mod exposition;
pub mod learn;
mod prefill_fit;
