//! Renders an Envoy bootstrap from `infergate.yaml`: the gateway listener with the
//! router filter, the loopback control listener, the singleton, and one
//! `override_host` cluster per pool.
#![forbid(unsafe_code)]

mod clusters;
mod ext_proc;
mod global;
mod identity;
pub mod kubernetes;
mod listeners;
mod wasm;
pub mod wasm_image;

use std::path::PathBuf;

use infergate_core::config::InfergateConfig;
use serde_json::{Value, json};

pub use clusters::UpstreamPolicy;
pub use global::{GATEWAYS_CLUSTER, render_global_bootstrap, render_global_bootstrap_yaml};
pub use wasm::PluginConfigError;

/// The `vm_id` shared by the router, the control filter and the singleton: shared data
/// and queues are scoped by it.
pub const VM_ID: &str = "infergate";
/// Where the control token reaches the VM: an environment variable of the Envoy
/// process, exposed with `host_env_keys`, so it is never written into the config.
pub const DEFAULT_TOKEN_ENV: &str = "INFERGATE_CONTROL_TOKEN";

/// Which Wasm runtime Envoy runs the filter in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum WasmRuntime {
    #[default]
    V8,
    Wasmtime,
    Wamr,
}

impl WasmRuntime {
    fn extension_name(self) -> &'static str {
        match self {
            WasmRuntime::V8 => "envoy.wasm.runtime.v8",
            WasmRuntime::Wasmtime => "envoy.wasm.runtime.wasmtime",
            WasmRuntime::Wamr => "envoy.wasm.runtime.wamr",
        }
    }
}

/// Where Envoy reads the filter's module from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WasmCode {
    /// A file on Envoy's machine: the absolute path of the built `infergate_filter.wasm`.
    Local(PathBuf),
    /// Fetched by Envoy over HTTP(S) through `cluster`, and refused unless its SHA-256 is
    /// `sha256`: how a gateway in Kubernetes gets the module without a volume.
    Remote { url: String, sha256: String, cluster: String },
}

/// Choices that are about this deployment rather than about routing.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    pub code: WasmCode,
    pub runtime: WasmRuntime,
    pub token_env: String,
    pub upstream_policy: UpstreamPolicy,
    /// Add `x-infergate-decision` to responses.
    pub explain: bool,
    /// Write an access log line per request to stdout.
    pub access_log: bool,
    /// Route through `infergate-epp` at these addresses (Envoy's ext_proc) instead of
    /// the filter: no Wasm, no control listener (the agent pushes to the pickers).
    /// Several are active-active replicas, health-checked by Envoy. Empty: the filter.
    pub ext_proc: Vec<std::net::SocketAddr>,
}

impl RenderOptions {
    pub fn new(wasm_path: PathBuf) -> Self {
        Self {
            code: WasmCode::Local(wasm_path),
            runtime: WasmRuntime::default(),
            token_env: DEFAULT_TOKEN_ENV.to_string(),
            upstream_policy: UpstreamPolicy::Infergate,
            explain: false,
            access_log: true,
            ext_proc: Vec::new(),
        }
    }

    /// Options for a gateway whose pickers are `infergate-epp` at `addresses`.
    pub fn ext_proc(addresses: Vec<std::net::SocketAddr>) -> Self {
        Self { ext_proc: addresses, ..Self::new(PathBuf::new()) }
    }

    /// The filter runs in Envoy (not baseline, not ext_proc).
    fn runs_filter(&self) -> bool {
        self.upstream_policy == UpstreamPolicy::Infergate && self.ext_proc.is_empty()
    }
}

/// The whole bootstrap as a JSON value (Envoy reads it as YAML or JSON).
pub fn render_bootstrap(config: &InfergateConfig, options: &RenderOptions) -> Result<Value, PluginConfigError> {
    let mut listeners = vec![listeners::gateway(config, options)?];
    let mut clusters = clusters::pool_clusters(config, options.upstream_policy);
    if options.upstream_policy == UpstreamPolicy::Infergate {
        clusters.extend(identity::jwks_cluster(&config.identity));
    }
    if options.ext_proc.is_empty() || options.upstream_policy != UpstreamPolicy::Infergate {
        listeners.push(listeners::control(&config.gateway, options)?);
    } else {
        clusters.push(ext_proc::cluster(&options.ext_proc));
    }
    let mut bootstrap = json!({
        "node": {"id": "infergate", "cluster": "infergate"},
        "admin": {"address": listeners::socket_address(config.gateway.admin)},
        "static_resources": {"listeners": listeners, "clusters": clusters},
    });
    if options.runs_filter() {
        bootstrap["bootstrap_extensions"] = json!([wasm::singleton(options)?]);
    }
    Ok(bootstrap)
}

/// The bootstrap as YAML text, with a header saying where it came from.
pub fn render_bootstrap_yaml(config: &InfergateConfig, options: &RenderOptions) -> Result<String, String> {
    let bootstrap = render_bootstrap(config, options).map_err(|e| e.to_string())?;
    let body = serde_yaml_ng::to_string(&bootstrap).map_err(|e| e.to_string())?;
    Ok(format!("# Rendered by infergate-envoy-config from infergate.yaml; edit that file, not this one.\n{body}"))
}

#[cfg(test)]
mod tests;
