//! The HTTP fleet: each pod serves the OpenAI API and `/metrics` over one engine that a
//! driver task steps in real time, scaled by `time_scale`.

pub mod api;
pub mod driver;
pub mod faults;
pub mod metrics_text;
pub mod pinned;
pub mod pod;

pub use metrics_text::MetricsFormat;
pub use pod::{Pod, PodSpec, serve};
