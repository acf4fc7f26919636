//! What the Envoy Gateway and Istio manifests have in common.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};

use infergate_core::config::{InfergateConfig, PodSelector, PoolConfig};
use serde_json::{Value, json};

use super::{KubernetesOptions, RenderError, WasmSource};
use crate::listeners::POOL_HEADER;
use crate::{PluginConfigError, RenderOptions, UpstreamPolicy, WasmCode, listeners, wasm};

/// The static cluster the singleton and the control filter fetch the module through.
pub const WASM_SOURCE_CLUSTER: &str = "infergate_wasm";
/// The listener the agent pushes snapshots to, added next to the platform's own.
pub const CONTROL_LISTENER: &str = "infergate-control";
/// The Service the agent pushes snapshots through, to the gateway pods' control port.
pub const CONTROL_SERVICE: &str = "infergate-control";
/// The HTTPRoute that sends each request to its pool's Service.
pub(crate) const ROUTE_NAME: &str = "infergate";

pub fn pool_service_name(pool: &str) -> String {
    format!("infergate-{pool}")
}

pub(crate) struct PlacedPool<'a> {
    pub pool: &'a PoolConfig,
    pub selector: &'a PodSelector,
    pub port: u16,
}

/// Every pool with the pod selector its Service needs, all in the route's namespace.
pub(crate) fn placed_pools<'a>(
    config: &'a InfergateConfig,
    options: &KubernetesOptions,
) -> Result<Vec<PlacedPool<'a>>, RenderError> {
    config
        .pools
        .iter()
        .map(|pool| {
            let selector = pool
                .discovery
                .as_ref()
                .and_then(|d| d.pods.as_ref())
                .filter(|s| !s.target_ports.is_empty())
                .ok_or_else(|| RenderError::PoolWithoutPodSelector { pool: pool.name.clone() })?;
            if selector.namespace != options.namespace {
                return Err(RenderError::PoolOutsideNamespace {
                    pool: pool.name.clone(),
                    pool_namespace: selector.namespace.clone(),
                    namespace: options.namespace.clone(),
                });
            }
            let port = selector.target_ports.first().copied().unwrap_or_default();
            Ok(PlacedPool { pool, selector, port })
        })
        .collect()
}

fn labels() -> Value {
    json!({"app.kubernetes.io/part-of": "infergate"})
}

/// One Service per pool: the platform turns it into the cluster whose endpoints the
/// filter chooses among.
pub(crate) fn services(pools: &[PlacedPool], namespace: &str) -> Vec<Value> {
    pools
        .iter()
        .map(|placed| {
            let ports: Vec<Value> = placed
                .selector
                .target_ports
                .iter()
                .map(
                    |port| json!({"name": format!("http-{port}"), "protocol": "TCP", "port": port, "targetPort": port}),
                )
                .collect();
            json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": pool_service_name(&placed.pool.name), "namespace": namespace, "labels": labels()},
                "spec": {"selector": placed.selector.match_labels, "ports": ports},
            })
        })
        .collect()
}

/// Rule `i` serves pool `i` once the filter has named it in `x-infergate-pool`; the
/// last rule only lets requests in, so that the filter runs and names the pool.
pub(crate) fn http_route(config: &InfergateConfig, pools: &[PlacedPool], options: &KubernetesOptions) -> Value {
    let timeout = format!("{}s", config.gateway.request_timeout_ms.div_ceil(1000));
    let backend = |placed: &PlacedPool| json!([{"group": "", "kind": "Service", "name": pool_service_name(&placed.pool.name), "port": placed.port}]);
    let mut rules: Vec<Value> = pools
        .iter()
        .map(|placed| {
            json!({
                "matches": [{"headers": [{"type": "Exact", "name": POOL_HEADER, "value": placed.pool.name}]}],
                "backendRefs": backend(placed),
                "timeouts": {"request": timeout},
            })
        })
        .collect();
    if let Some(first) = pools.first() {
        rules.push(json!({
            "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
            "backendRefs": backend(first),
            "timeouts": {"request": timeout},
        }));
    }
    let gateway = &options.gateway;
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": ROUTE_NAME, "namespace": options.namespace, "labels": labels()},
        "spec": {
            "parentRefs": [{
                "group": "gateway.networking.k8s.io", "kind": "Gateway",
                "namespace": gateway.namespace, "name": gateway.name, "sectionName": gateway.listener,
            }],
            "rules": rules,
        },
    })
}

/// The module's URL as a cluster Envoy can fetch it through at startup.
pub(crate) fn wasm_source_cluster(wasm: &WasmSource) -> Result<Value, RenderError> {
    let bad = |reason: &str| RenderError::BadWasmUrl { url: wasm.url.clone(), reason: reason.to_string() };
    let url = url::Url::parse(&wasm.url).map_err(|e| bad(&e.to_string()))?;
    let tls = match url.scheme() {
        "http" => false,
        "https" => true,
        _ => return Err(bad("the singleton and the control filter fetch the module over http or https")),
    };
    let host = url.host_str().ok_or_else(|| bad("no host"))?;
    let port = url.port_or_known_default().ok_or_else(|| bad("no port"))?;
    if wasm.sha256.len() != 64 || !wasm.sha256.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(RenderError::BadSha256 { sha256: wasm.sha256.clone() });
    }
    let mut cluster = json!({
        "name": WASM_SOURCE_CLUSTER,
        "type": "STRICT_DNS",
        "connect_timeout": "5s",
        "dns_lookup_family": "V4_PREFERRED",
        "load_assignment": {"cluster_name": WASM_SOURCE_CLUSTER, "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {"address": host, "port_value": port}}}},
        ]}]},
    });
    if tls {
        cluster["transport_socket"] = json!({
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "sni": host,
                "common_tls_context": {"validation_context": {
                    "trusted_ca": {"filename": "/etc/ssl/certs/ca-certificates.crt"},
                }},
            },
        });
    }
    Ok(cluster)
}

/// Render options for the roles we add ourselves: the module by URL.
pub(crate) fn remote_options(options: &KubernetesOptions) -> RenderOptions {
    RenderOptions {
        code: WasmCode::Remote {
            url: options.wasm.url.clone(),
            sha256: options.wasm.sha256.clone(),
            cluster: WASM_SOURCE_CLUSTER.to_string(),
        },
        runtime: options.runtime,
        token_env: options.token_env.clone(),
        upstream_policy: UpstreamPolicy::Infergate,
        explain: false,
        access_log: false,
        ext_proc: Vec::new(),
    }
}

/// The control listener on every interface at the configured port: the agent runs in
/// another pod. The token guards it, and the NetworkPolicy we ship limits who can connect.
pub(crate) fn control_listener(config: &InfergateConfig, options: &KubernetesOptions) -> Result<Value, RenderError> {
    let mut placed = config.clone();
    placed.gateway.control = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), config.gateway.control.port());
    let mut listener = listeners::control(&placed.gateway, &remote_options(options))?;
    listener["name"] = json!(CONTROL_LISTENER);
    Ok(listener)
}

pub(crate) fn singleton(options: &KubernetesOptions) -> Result<Value, RenderError> {
    Ok(wasm::singleton(&remote_options(options))?)
}

/// The router's plugin configuration as JSON, as the platforms' wasm APIs carry it;
/// `pool_clusters` names each pool's cluster as the platform does.
pub(crate) fn router_configuration(
    config: &InfergateConfig,
    pool_clusters: BTreeMap<String, String>,
) -> Result<Value, RenderError> {
    serde_json::to_value(wasm::router_role(config, false, pool_clusters)).map_err(|e| {
        RenderError::PluginConfig(PluginConfigError { plugin: "infergate-router".to_string(), reason: e.to_string() })
    })
}

/// Each pool's cluster sends requests to the pods the filter ranked.
pub(crate) fn override_host_policy() -> Value {
    crate::clusters::load_balancing_policy(UpstreamPolicy::Infergate)
}

fn other_ports(control: u16) -> Vec<Value> {
    let mut ranges = Vec::new();
    if control > 1 {
        ranges.push(json!({"protocol": "TCP", "port": 1, "endPort": control - 1}));
    }
    if control < u16::MAX {
        ranges.push(json!({"protocol": "TCP", "port": control + 1, "endPort": u16::MAX}));
    }
    ranges
}

/// The agent's way to the gateway pods' control listener. With several gateway
/// replicas, each must get every push: give the agent one `--control` per pod instead.
pub(crate) fn control_service(
    config: &InfergateConfig,
    options: &KubernetesOptions,
    gateway_pod_labels: &Value,
) -> Value {
    let port = config.gateway.control.port();
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": CONTROL_SERVICE, "namespace": options.gateway.pods_namespace, "labels": labels()},
        "spec": {
            "selector": gateway_pod_labels,
            "ports": [{"name": "control", "protocol": "TCP", "port": port, "targetPort": port}],
        },
    })
}

/// The NetworkPolicy that lets only the agent reach the control port of the gateway pods.
pub(crate) fn control_network_policy(
    config: &InfergateConfig,
    options: &KubernetesOptions,
    gateway_pod_labels: Value,
) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": CONTROL_SERVICE, "namespace": options.gateway.pods_namespace, "labels": labels()},
        "spec": {
            "podSelector": {"matchLabels": gateway_pod_labels},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "infergate-system"}},
                        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "infergate-metrics-agent"}},
                    }],
                    "ports": [{"protocol": "TCP", "port": config.gateway.control.port()}],
                },
                // Every other port stays as open as it was: a selected pod refuses what
                // no rule allows.
                {"ports": other_ports(config.gateway.control.port())},
            ],
        },
    })
}

/// The identity filters (`identity:`) for gateway pods: the removal of the client's copy
/// of the identity header, then `jwt_authn` for a `jwt` identity with a local JWKS
/// written in; and the remote JWKS's cluster, if any. Both platforms insert them ahead
/// of the router through their patch resources, as the plain bootstrap places them.
pub(crate) fn identity_filters(config: &InfergateConfig) -> Result<(Vec<Value>, Option<Value>), RenderError> {
    let filters = crate::identity::filters_for_cluster(&config.identity, &config.flow_control.tenant_header)
        .map_err(RenderError::Identity)?;
    Ok((filters, crate::identity::jwks_cluster(&config.identity)))
}
