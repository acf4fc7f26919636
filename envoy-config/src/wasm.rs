//! The Wasm plugin configs: one module, four roles (router, control and singleton here;
//! the global router's from `global.rs`) on one `vm_id`.

use std::collections::BTreeMap;

use infergate_core::config::InfergateConfig;
use infergate_core::filter_config::{ControlRole, FilterConfig, RouterRole};
use serde::Serialize;
use serde_json::{Value, json};

use crate::{RenderOptions, VM_ID, WasmCode};

/// A role's plugin configuration that could not be written as JSON: a type in `core`
/// that JSON cannot hold (a map with non-string keys, say). Rendering stops here, rather
/// than hand Envoy an empty configuration that the filter would refuse at load time,
/// far from the cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot write the plugin configuration of {plugin} as JSON: {reason}")]
pub struct PluginConfigError {
    /// The plugin's name in the rendered config, e.g. `infergate-router`.
    pub plugin: String,
    /// What serde_json said.
    pub reason: String,
}

fn code(code: &WasmCode) -> Value {
    match code {
        WasmCode::Local(path) => json!({"local": {"filename": path.display().to_string()}}),
        WasmCode::Remote { url, sha256, cluster } => json!({"remote": {
            "http_uri": {"uri": url, "cluster": cluster, "timeout": "30s"},
            "sha256": sha256,
            // The module's server may start after Envoy; keep trying instead of failing.
            "retry_policy": {"num_retries": 10},
        }}),
    }
}

fn vm_config(options: &RenderOptions) -> Value {
    json!({
        "vm_id": VM_ID,
        "runtime": options.runtime.extension_name(),
        "code": code(&options.code),
        "environment_variables": {"host_env_keys": [options.token_env]},
    })
}

/// The role as the JSON text Envoy hands the filter's `on_configure`.
fn configuration(name: &str, role: &impl Serialize) -> Result<String, PluginConfigError> {
    serde_json::to_string(role).map_err(|e| PluginConfigError { plugin: name.to_string(), reason: e.to_string() })
}

fn plugin(name: &str, root_id: &str, role: &FilterConfig, options: &RenderOptions) -> Result<Value, PluginConfigError> {
    let configuration = configuration(name, role)?;
    Ok(json!({
        "name": name,
        "root_id": root_id,
        "vm_config": vm_config(options),
        "configuration": {
            "@type": "type.googleapis.com/google.protobuf.StringValue",
            "value": configuration,
        },
        // Without it, pausing on request headers to read the body hangs the stream.
        "allow_on_headers_stop_iteration": true,
        // A trapped VM is replaced instead of failing every later request.
        "failure_policy": "FAIL_RELOAD",
    }))
}

/// The router's configuration, also what Envoy Gateway and Istio carry as plugin config;
/// `pool_clusters` names the pools' clusters where a platform names them.
pub(crate) fn router_role(
    config: &InfergateConfig,
    explain: bool,
    pool_clusters: BTreeMap<String, String>,
) -> FilterConfig {
    FilterConfig::Router(Box::new(RouterRole {
        vm_id: VM_ID.to_string(),
        routing: config.routing_config(),
        max_body_bytes: config.gateway.max_body_bytes,
        early_decision: config.gateway.early_decision,
        explain,
        tenant: Some(config.tenant_source()),
        pool_clusters,
    }))
}

/// A role as a typed `Wasm` HTTP filter config.
pub(crate) fn typed_config(
    name: &str,
    root_id: &str,
    role: &FilterConfig,
    options: &RenderOptions,
) -> Result<Value, PluginConfigError> {
    Ok(json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
        "config": plugin(name, root_id, role, options)?,
    }))
}

/// The router as a typed `Wasm` filter config, also what Istio's extension config holds.
pub(crate) fn router_typed_config(
    config: &InfergateConfig,
    options: &RenderOptions,
    pool_clusters: BTreeMap<String, String>,
) -> Result<Value, PluginConfigError> {
    typed_config("infergate-router", "router", &router_role(config, options.explain, pool_clusters), options)
}

pub(crate) fn router_filter(config: &InfergateConfig, options: &RenderOptions) -> Result<Value, PluginConfigError> {
    // The bootstrap names each pool's cluster `pool-<name>`, the filter's default.
    Ok(
        json!({"name": "envoy.filters.http.wasm", "typed_config": router_typed_config(config, options, BTreeMap::new())?}),
    )
}

pub(crate) fn control_filter(options: &RenderOptions) -> Result<Value, PluginConfigError> {
    let role = FilterConfig::Control(ControlRole { vm_id: VM_ID.to_string(), token_env: options.token_env.clone() });
    Ok(
        json!({"name": "envoy.filters.http.wasm", "typed_config": typed_config("infergate-control", "control", &role, options)?}),
    )
}

pub(crate) fn singleton(options: &RenderOptions) -> Result<Value, PluginConfigError> {
    Ok(json!({
        "name": "envoy.bootstrap.wasm",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.wasm.v3.WasmService",
            "singleton": true,
            "config": plugin("infergate-singleton", "singleton", &FilterConfig::Singleton, options)?,
        },
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn the_configuration_envoy_hands_the_filter_parses_back_as_the_role() {
        let options = RenderOptions::new("/x.wasm".into());
        let role = FilterConfig::Control(ControlRole { vm_id: VM_ID.to_string(), token_env: "TOKEN".into() });
        let filter = typed_config("infergate-control", "control", &role, &options).unwrap();
        let text = filter["config"]["configuration"]["value"].as_str().unwrap();
        assert_eq!(serde_json::from_str::<FilterConfig>(text).unwrap(), role);
    }

    /// A configuration that JSON cannot hold is an error naming the plugin, never an
    /// empty string for the filter to refuse inside Envoy.
    #[test]
    fn a_configuration_json_cannot_hold_is_an_error_naming_the_plugin() {
        let tuple_keys = BTreeMap::from([((1, 2), "pod")]);
        let error = configuration("infergate-router", &tuple_keys).unwrap_err();
        assert_eq!(error.plugin, "infergate-router");
        assert!(
            error
                .to_string()
                .starts_with("cannot write the plugin configuration of infergate-router as JSON: key must be"),
            "{error}"
        );
    }
}
