//! The Wasm plugin configs: one module, three roles on one `vm_id`.

use infergate_core::config::InfergateConfig;
use infergate_core::filter_config::{ControlRole, FilterConfig, RouterRole};
use serde_json::{Value, json};

use crate::{RenderOptions, VM_ID, WasmCode};

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

fn plugin(name: &str, root_id: &str, role: &FilterConfig, options: &RenderOptions) -> Value {
    let configuration = serde_json::to_string(role).unwrap_or_default();
    json!({
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
    })
}

/// The router's configuration, also what Envoy Gateway and Istio carry as plugin config.
pub(crate) fn router_role(config: &InfergateConfig, explain: bool) -> FilterConfig {
    FilterConfig::Router(Box::new(RouterRole {
        vm_id: VM_ID.to_string(),
        routing: config.routing_config(),
        max_body_bytes: config.gateway.max_body_bytes,
        explain,
    }))
}

/// A role as a typed `Wasm` HTTP filter config.
pub(crate) fn typed_config(name: &str, root_id: &str, role: &FilterConfig, options: &RenderOptions) -> Value {
    json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
        "config": plugin(name, root_id, role, options),
    })
}

/// The router as a typed `Wasm` filter config, also what Istio's extension config holds.
pub(crate) fn router_typed_config(config: &InfergateConfig, options: &RenderOptions) -> Value {
    typed_config("infergate-router", "router", &router_role(config, options.explain), options)
}

pub(crate) fn router_filter(config: &InfergateConfig, options: &RenderOptions) -> Value {
    json!({"name": "envoy.filters.http.wasm", "typed_config": router_typed_config(config, options)})
}

pub(crate) fn control_filter(options: &RenderOptions) -> Value {
    let role = FilterConfig::Control(ControlRole { vm_id: VM_ID.to_string(), token_env: options.token_env.clone() });
    json!({"name": "envoy.filters.http.wasm", "typed_config": typed_config("infergate-control", "control", &role, options)})
}

pub(crate) fn singleton(options: &RenderOptions) -> Value {
    json!({
        "name": "envoy.bootstrap.wasm",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.wasm.v3.WasmService",
            "singleton": true,
            "config": plugin("infergate-singleton", "singleton", &FilterConfig::Singleton, options),
        },
    })
}
