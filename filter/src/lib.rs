//! infergate's Envoy filter: a thin proxy-wasm shell over `infergate-core`.
//!
//! One module, four roles chosen by the plugin configuration's `role`:
//! - `router` on the main listener: reads the body, asks the core router for ranked
//!   pods, and sets the headers the `override_host` cluster routes on;
//! - `control` on the loopback control listener: admits snapshot pushes from the
//!   metrics agent and queues them;
//! - `singleton` as a bootstrap service: publishes the newest snapshot to all workers;
//! - `global` on tier 2's main listener: ranks clusters from their agents' summaries
//!   (which the control role stores) and names their gateways.
//!
//! The filter must never panic (a panic kills the worker's VM), so it reaches the host
//! only through `host`, whose calls return `Result`, and clippy denies the rest.
#![deny(unsafe_code, clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod backlog;
mod control;
mod global;
mod host;
mod intake;
mod ledger;
mod metrics;
mod peers;
mod root;
mod router;
mod shared_words;
mod singleton;
mod summaries;

use proxy_wasm::types::LogLevel;

// The SDK's entry point macro exports `_initialize`, which needs `no_mangle`.
#[allow(unsafe_code)]
mod entry {
    use super::*;

    proxy_wasm::main! {{
        proxy_wasm::set_log_level(LogLevel::Info);
        proxy_wasm::set_root_context(|_| Box::new(root::PluginRoot::default()));
    }}
}
