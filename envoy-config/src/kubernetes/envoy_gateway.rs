//! Envoy Gateway: an `EnvoyExtensionPolicy` places the router on our HTTPRoute; an
//! `EnvoyPatchPolicy` and an `EnvoyProxy` add what that API has no field for.
//!
//! Each patch, and why it exists:
//! - `allow_on_headers_stop_iteration: true` on the router: the filter pauses on the
//!   request headers until it has read `model` from the body. Without the flag Envoy
//!   turns that pause into "stop everything", the body never reaches the filter and the
//!   request hangs. `EnvoyExtensionPolicy` has no field for it.
//! - `vm_id: infergate` on the router: Envoy Gateway names the VM after the policy, but
//!   shared data and queues are scoped by `vm_id`, and the control filter and the
//!   singleton must see the router's. `EnvoyExtensionPolicy` has no field for it.
//! - `per_connection_buffer_limit_bytes` on the listener: room for `max_body_bytes`, so
//!   that the filter answers an oversized body with its 413 instead of Envoy resetting.
//! - `load_balancing_policy` on each pool's cluster: `override_host`, which sends each
//!   request to the pods the filter ranked in `x-gateway-destination-endpoint`, and
//!   only to pods of that cluster.
//! - The control listener, added whole: the agent's snapshot pushes arrive there.
//! - With an `identity:` other than the client's own header, its filters first in the
//!   listener's chain (ahead of Envoy Gateway's own, a `SecurityPolicy`'s `jwt_authn`
//!   included): the removal of the client's copy of the identity header, then, for
//!   `jwt`, our `jwt_authn` with the JWKS written in (a remote JWKS gets its cluster).
//!   A `SecurityPolicy` cannot remove a header before its own filter runs.
//! - The singleton and the module's source cluster go in the bootstrap, through the
//!   `EnvoyProxy` (an xDS patch cannot add a bootstrap extension): the singleton is the
//!   only VM that owns the snapshot queue.

use std::collections::BTreeMap;

use infergate_core::config::InfergateConfig;
use serde_json::{Value, json};

use super::shared::{self, PlacedPool, ROUTE_NAME};
use super::{CONTROL_LISTENER, KubernetesOptions, RenderError};
use crate::VM_ID;
use crate::listeners::BUFFER_HEADROOM_BYTES;

const API_VERSION: &str = "gateway.envoyproxy.io/v1alpha1";
const POLICY_NAME: &str = "infergate";
const ROUTER_PLUGIN: &str = "infergate-router";
const LISTENER_TYPE: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
const CLUSTER_TYPE: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

/// The name Envoy Gateway gives the HTTP filter of wasm entry `index` of a policy.
pub fn router_filter_name(options: &KubernetesOptions) -> String {
    format!("envoy.filters.http.wasm/envoyextensionpolicy/{}/{POLICY_NAME}/wasm/0", options.namespace)
}

/// The name Envoy Gateway gives the xDS listener of a Gateway listener.
pub fn listener_name(options: &KubernetesOptions) -> String {
    let gateway = &options.gateway;
    format!("{}/{}/{}", gateway.namespace, gateway.name, gateway.listener)
}

/// The name Envoy Gateway gives the cluster of rule `index` of our HTTPRoute.
pub fn route_cluster_name(options: &KubernetesOptions, index: usize) -> String {
    format!("httproute/{}/{ROUTE_NAME}/rule/{index}", options.namespace)
}

/// The labels Envoy Gateway puts on a Gateway's Envoy pods.
pub fn gateway_pod_labels(options: &KubernetesOptions) -> Value {
    json!({
        "gateway.envoyproxy.io/owning-gateway-namespace": options.gateway.namespace,
        "gateway.envoyproxy.io/owning-gateway-name": options.gateway.name,
    })
}

/// Everything to apply, in order: the pools' Services, the HTTPRoute, the three
/// policies, the control Service and its NetworkPolicy.
pub fn render(config: &InfergateConfig, options: &KubernetesOptions) -> Result<Vec<Value>, RenderError> {
    let pools = shared::placed_pools(config, options)?;
    let mut documents = shared::services(&pools, &options.namespace);
    documents.push(shared::http_route(config, &pools, options));
    documents.push(extension_policy(config, &pools, options)?);
    documents.push(patch_policy(config, &pools, options)?);
    documents.push(envoy_proxy(options)?);
    let pod_labels = gateway_pod_labels(options);
    documents.push(shared::control_service(config, options, &pod_labels));
    documents.push(shared::control_network_policy(config, options, pod_labels));
    Ok(documents)
}

/// Each pool's cluster, as Envoy Gateway names the cluster of its HTTPRoute rule: where
/// the filter sends a split request's prefill leg.
fn pool_clusters(pools: &[PlacedPool], options: &KubernetesOptions) -> BTreeMap<String, String> {
    pools
        .iter()
        .enumerate()
        .map(|(index, placed)| (placed.pool.name.clone(), route_cluster_name(options, index)))
        .collect()
}

fn extension_policy(
    config: &InfergateConfig,
    pools: &[PlacedPool],
    options: &KubernetesOptions,
) -> Result<Value, RenderError> {
    let code = match &options.wasm.image {
        Some(image) => json!({"type": "Image", "image": {"url": image}}),
        None => json!({"type": "HTTP", "http": {"url": options.wasm.url, "sha256": options.wasm.sha256}}),
    };
    Ok(json!({
        "apiVersion": API_VERSION,
        "kind": "EnvoyExtensionPolicy",
        "metadata": {"name": POLICY_NAME, "namespace": options.namespace},
        "spec": {
            "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": ROUTE_NAME}],
            "wasm": [{
                "name": ROUTER_PLUGIN,
                "rootID": "router",
                "code": code,
                "config": shared::router_configuration(config, pool_clusters(pools, options))?,
                "env": {"hostKeys": [options.token_env]},
                // A VM that cannot start must not let requests through unrouted.
                "failOpen": false,
            }],
        },
    }))
}

fn patch(kind: &str, name: &str, operation: Value) -> Value {
    json!({"type": kind, "name": name, "operation": operation})
}

/// The xDS patches, as Envoy Gateway applies them: to its resources in proto field
/// names, with `jsonPath` selecting our filter wherever it sits in the chain.
pub fn xds_patches(config: &InfergateConfig, options: &KubernetesOptions) -> Result<Vec<Value>, RenderError> {
    let pools = shared::placed_pools(config, options)?;
    xds_patches_for(config, &pools, options)
}

fn xds_patches_for(
    config: &InfergateConfig,
    pools: &[PlacedPool],
    options: &KubernetesOptions,
) -> Result<Vec<Value>, RenderError> {
    let listener = listener_name(options);
    let router = format!("$..http_filters[?(@.name=='{}')]", router_filter_name(options));
    let (identity, jwks_cluster) = shared::identity_filters(config)?;
    let mut patches: Vec<Value> = identity
        .into_iter()
        .enumerate()
        .map(|(index, filter)| {
            let at = format!("/{index}");
            patch(
                LISTENER_TYPE,
                &listener,
                json!({"op": "add", "jsonPath": "$..http_filters", "path": at, "value": filter}),
            )
        })
        .collect();
    if let Some(cluster) = jwks_cluster {
        patches.push(patch(
            CLUSTER_TYPE,
            crate::identity::JWKS_CLUSTER,
            json!({"op": "add", "path": "", "value": cluster}),
        ));
    }
    patches.extend([
        patch(
            LISTENER_TYPE,
            &listener,
            json!({"op": "add", "jsonPath": router, "path": "/typed_config/config/allow_on_headers_stop_iteration", "value": true}),
        ),
        patch(
            LISTENER_TYPE,
            &listener,
            json!({"op": "replace", "jsonPath": router, "path": "/typed_config/config/vm_config/vm_id", "value": VM_ID}),
        ),
        patch(
            LISTENER_TYPE,
            &listener,
            json!({"op": "add", "path": "/per_connection_buffer_limit_bytes",
                   "value": config.gateway.max_body_bytes + BUFFER_HEADROOM_BYTES}),
        ),
        patch(
            LISTENER_TYPE,
            CONTROL_LISTENER,
            json!({"op": "add", "path": "", "value": shared::control_listener(config, options)?}),
        ),
    ]);
    patches.extend(pools.iter().enumerate().map(|(index, _)| {
        patch(
            CLUSTER_TYPE,
            &route_cluster_name(options, index),
            json!({"op": "add", "path": "/load_balancing_policy", "value": shared::override_host_policy()}),
        )
    }));
    Ok(patches)
}

fn patch_policy(
    config: &InfergateConfig,
    pools: &[PlacedPool],
    options: &KubernetesOptions,
) -> Result<Value, RenderError> {
    Ok(json!({
        "apiVersion": API_VERSION,
        "kind": "EnvoyPatchPolicy",
        "metadata": {"name": POLICY_NAME, "namespace": options.gateway.namespace},
        "spec": {
            "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": options.gateway.name},
            "type": "JSONPatch",
            "jsonPatches": xds_patches_for(config, pools, options)?,
        },
    }))
}

/// The bootstrap patches for the `EnvoyProxy`, as RFC 6902 operations.
pub fn bootstrap_patches(options: &KubernetesOptions) -> Result<Vec<Value>, RenderError> {
    Ok(vec![
        json!({"op": "add", "path": "/bootstrap_extensions", "value": [shared::singleton(options)?]}),
        json!({"op": "add", "path": "/static_resources/clusters/-", "value": shared::wasm_source_cluster(&options.wasm)?}),
    ])
}

/// Referenced from the Gateway's `spec.infrastructure.parametersRef`.
fn envoy_proxy(options: &KubernetesOptions) -> Result<Value, RenderError> {
    Ok(json!({
        "apiVersion": API_VERSION,
        "kind": "EnvoyProxy",
        "metadata": {"name": POLICY_NAME, "namespace": options.gateway.namespace},
        "spec": {
            "bootstrap": {"type": "JSONPatch", "jsonPatches": bootstrap_patches(options)?},
            "provider": {"type": "Kubernetes", "kubernetes": {"envoyDeployment": {"container": {"env": [{
                "name": options.token_env,
                "valueFrom": {"secretKeyRef": {"name": options.token_secret, "key": "token"}},
            }]}}}},
        },
    }))
}
