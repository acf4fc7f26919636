//! infergate's Envoy filter: a thin proxy-wasm shell over `infergate-core`.
//!
//! ```text
//! host/            what the filter asks of Envoy, and what Envoy calls
//!   mod.rs           the `Host` trait: every host call, each returning a Result
//!   events.rs        the callbacks the roles implement
//!   sdk.rs           the only code that calls the proxy-wasm SDK; the entry point
//!   fake.rs          (tests) an Envoy of several workers in one process
//! plugin.rs        reads the plugin configuration and starts one role:
//! roles/
//!   front/           the steps router and global both take for a client request
//!   router/          main listener: reads the body, asks the core router for ranked
//!                    pods, sets the headers the `override_host` cluster routes on;
//!                    sends a split request's prefill leg first (disaggregation);
//!                    shares pod load and prefix ownership with the other workers
//!   control/         loopback control listener: admits the agent's snapshot pushes
//!                    (and, on tier 2, clusters' summaries) and queues them
//!   singleton.rs     bootstrap service: publishes the newest snapshot to all workers
//!   global/          tier 2's main listener: ranks clusters from their summaries and
//!                    names their gateways
//! shared/          values in Envoy's shared data the roles agree on, with codecs
//! metrics.rs       one Envoy stat
//! ```
//!
//! The filter must never panic (a panic kills the worker's VM), so it reaches the host
//! only through `Host`, whose calls return `Result`, and clippy denies the rest.
#![deny(unsafe_code, clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod host;
mod metrics;
mod plugin;
mod roles;
mod shared;
#[cfg(test)]
mod test_support;
