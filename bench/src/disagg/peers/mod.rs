//! The peers' P/D routing, each re-implemented from its current code (the notes in
//! each file name the release and files): which requests they split, and where each
//! leg goes.

mod aibrix;
mod dynamo;
mod llmd;
mod routed_index;
mod sglang;
mod vllm_proxy;

pub use aibrix::AibrixPd;
pub use dynamo::DynamoPd;
pub use llmd::LlmdPd;
pub use sglang::SglangPd;
pub use vllm_proxy::VllmProxy;
