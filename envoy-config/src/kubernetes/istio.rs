//! Istio, with a Gateway API `Gateway` of class `istio`: one `EnvoyFilter` places the
//! three roles on the gateway's pods.
//!
//! Why an `EnvoyFilter` and not a `WasmPlugin` for the router: the router pauses on the
//! request headers until it has read `model` from the body, which needs
//! `allow_on_headers_stop_iteration: true` in the plugin config (without it the request
//! hangs), and it must share `vm_id: infergate` with the control filter and the
//! singleton. A `WasmPlugin` has no field for either, and an `EnvoyFilter` cannot patch
//! the extension config Istio generates from a `WasmPlugin` (EXTENSION_CONFIG patches
//! only ADD). So the router goes in as an extension config of our own, which istio-agent
//! fetches and verifies by SHA-256 exactly as it would for a `WasmPlugin`.
//!
//! The other patches:
//! - with an `identity:` other than the client's own header, its filters go before the
//!   router: the removal of the client's copy of the identity header, then, for `jwt`,
//!   our `jwt_authn` with the JWKS written in (a remote JWKS gets its cluster). A
//!   `RequestAuthentication` cannot remove a header before its own filter runs;
//! - the router is inserted before `envoy.filters.http.router` on the gateway listener;
//! - the listener's buffer limit leaves room for `max_body_bytes` (the filter's 413);
//! - each pool's cluster gets the `override_host` policy (the ranked pods, only pods of
//!   that cluster);
//! - the control listener is added whole;
//! - the singleton and the module's source cluster are merged into the bootstrap (they
//!   take effect when the gateway pods start).

use std::collections::BTreeMap;

use infergate_core::config::InfergateConfig;
use serde_json::{Value, json};

use super::shared::{self, PlacedPool};
use super::{KubernetesOptions, RenderError, pool_service_name};
use crate::listeners::BUFFER_HEADROOM_BYTES;
use crate::wasm;

const FILTER_NAME: &str = "infergate";
/// The name of the router's extension config, and of the HTTP filter that loads it.
pub const ROUTER_EXTENSION: &str = "infergate-router";
const WASM_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";
const HCM: &str = "envoy.filters.network.http_connection_manager";

/// The label Istio puts on the pods of a Gateway API gateway.
pub fn gateway_pod_labels(options: &KubernetesOptions) -> Value {
    json!({"gateway.networking.k8s.io/gateway-name": options.gateway.name})
}

/// The name Istio gives a Service's cluster on a gateway.
pub fn cluster_name(options: &KubernetesOptions, pool: &str, port: u16) -> String {
    format!("outbound|{port}||{}", service_host(options, pool))
}

/// Each pool's cluster, as Istio names its Service's: where the filter sends a split
/// request's prefill leg.
fn pool_clusters(pools: &[PlacedPool], options: &KubernetesOptions) -> BTreeMap<String, String> {
    pools
        .iter()
        .map(|placed| (placed.pool.name.clone(), cluster_name(options, &placed.pool.name, placed.port)))
        .collect()
}

fn service_host(options: &KubernetesOptions, pool: &str) -> String {
    format!("{}.{}.svc.cluster.local", pool_service_name(pool), options.namespace)
}

/// Everything to apply, in order: Services, HTTPRoute, the EnvoyFilter, the gateway's
/// deployment options (the token's environment variable), the NetworkPolicy.
pub fn render(config: &InfergateConfig, options: &KubernetesOptions) -> Result<Vec<Value>, RenderError> {
    let pools = shared::placed_pools(config, options)?;
    let mut documents = shared::services(&pools, &options.namespace);
    documents.push(shared::http_route(config, &pools, options));
    documents.push(json!({
        "apiVersion": "networking.istio.io/v1alpha3",
        "kind": "EnvoyFilter",
        "metadata": {"name": FILTER_NAME, "namespace": options.gateway.namespace},
        "spec": {
            "workloadSelector": {"labels": gateway_pod_labels(options)},
            "configPatches": config_patches_for(config, &pools, options)?,
        },
    }));
    documents.push(deployment_options(options));
    documents.push(shared::control_service(config, options, &gateway_pod_labels(options)));
    documents.push(shared::control_network_policy(config, options, gateway_pod_labels(options)));
    Ok(documents)
}

/// The EnvoyFilter's patches.
pub fn config_patches(config: &InfergateConfig, options: &KubernetesOptions) -> Result<Vec<Value>, RenderError> {
    let pools = shared::placed_pools(config, options)?;
    config_patches_for(config, &pools, options)
}

fn config_patches_for(
    config: &InfergateConfig,
    pools: &[PlacedPool],
    options: &KubernetesOptions,
) -> Result<Vec<Value>, RenderError> {
    let remote = shared::remote_options(options);
    let gateway_listener = json!({"context": "GATEWAY", "listener": {"portNumber": options.gateway.port}});
    let mut router_filter_match = gateway_listener.clone();
    router_filter_match["listener"]["filterChain"] =
        json!({"filter": {"name": HCM, "subFilter": {"name": "envoy.filters.http.router"}}});
    let (identity, jwks_cluster) = shared::identity_filters(config)?;
    let mut patches: Vec<Value> = identity
        .into_iter()
        .map(|filter| {
            json!({
                "applyTo": "HTTP_FILTER",
                "match": router_filter_match,
                "patch": {"operation": "INSERT_BEFORE", "value": filter},
            })
        })
        .collect();
    if let Some(cluster) = jwks_cluster {
        patches.push(json!({"applyTo": "CLUSTER", "match": {"context": "GATEWAY"}, "patch": {"operation": "ADD", "value": cluster}}));
    }
    patches.extend([
        json!({
            "applyTo": "EXTENSION_CONFIG",
            "patch": {"operation": "ADD", "value": {
                "name": ROUTER_EXTENSION,
                "typed_config": wasm::router_typed_config(config, &remote, pool_clusters(pools, options))?,
            }},
        }),
        json!({
            "applyTo": "HTTP_FILTER",
            "match": router_filter_match,
            "patch": {"operation": "INSERT_BEFORE", "value": {
                "name": ROUTER_EXTENSION,
                // No timeout: the gateway waits for the router rather than serve unrouted.
                "config_discovery": {"config_source": {"ads": {}, "initial_fetch_timeout": "0s"}, "type_urls": [WASM_TYPE]},
            }},
        }),
        json!({
            "applyTo": "LISTENER",
            "match": gateway_listener,
            "patch": {"operation": "MERGE", "value": {
                "per_connection_buffer_limit_bytes": config.gateway.max_body_bytes + BUFFER_HEADROOM_BYTES,
            }},
        }),
        json!({
            "applyTo": "LISTENER",
            "match": {"context": "GATEWAY"},
            "patch": {"operation": "ADD", "value": shared::control_listener(config, options)?},
        }),
        json!({
            "applyTo": "BOOTSTRAP",
            "patch": {"operation": "MERGE", "value": {
                "bootstrap_extensions": [shared::singleton(options)?],
                "static_resources": {"clusters": [shared::wasm_source_cluster(&options.wasm)?]},
            }},
        }),
    ]);
    patches.extend(pools.iter().map(|placed| {
        json!({
            "applyTo": "CLUSTER",
            "match": {"context": "GATEWAY", "cluster": {
                "service": service_host(options, &placed.pool.name), "portNumber": placed.port,
            }},
            // Istio's `lb_policy: LEAST_REQUEST` stays; Envoy balances by
            // `load_balancing_policy` when both are set (kind-test's platform_runs).
            "patch": {"operation": "MERGE", "value": {"load_balancing_policy": shared::override_host_policy()}},
        })
    }));
    Ok(patches)
}

/// Istio's per-Gateway deployment overlay (referenced from the Gateway's
/// `spec.infrastructure.parametersRef`): the control token from its Secret.
fn deployment_options(options: &KubernetesOptions) -> Value {
    let overlay = json!({"spec": {"template": {"spec": {"containers": [{
        "name": "istio-proxy",
        "env": [{"name": options.token_env, "valueFrom": {"secretKeyRef": {"name": options.token_secret, "key": "token"}}}],
    }]}}}});
    let text = serde_yaml_ng::to_string(&overlay).unwrap_or_default();
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "infergate-gateway-options", "namespace": options.gateway.pods_namespace},
        "data": {"deployment": text},
    })
}
