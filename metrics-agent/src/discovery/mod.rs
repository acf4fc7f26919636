//! What the agent scrapes, and how it learns about changes: the config (a watched file
//! or an `InferenceGatewayConfig` resource) and each pool's pods (static, or found in
//! Kubernetes). Both flow into one [`Fleet`] value that the scrape loop follows.

pub mod config_file;
pub mod fleet;
pub mod kubernetes;

pub use fleet::{Fleet, PoolEndpoints, Target};
