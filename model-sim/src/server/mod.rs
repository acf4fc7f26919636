//! The HTTP fleet: each pod serves the OpenAI API and `/metrics` over one engine that a
//! driver task steps in real time, scaled by `time_scale`, and speaks vLLM's
//! prefill/decode handover (`kv_transfer_params`) with the other pods.

pub mod api;
pub mod driver;
pub mod faults;
pub mod handover;
mod http_client;
pub mod kv_link;
pub mod kv_publisher;
pub mod kv_registry;
pub mod kv_transfer;
pub mod metrics_text;
pub mod pinned;
pub mod pod;
pub mod sidecar;
pub mod tokens;

pub use kv_transfer::{KvRole, PdSettings};
pub use metrics_text::MetricsFormat;
pub use pod::{Pod, PodSpec, serve};
