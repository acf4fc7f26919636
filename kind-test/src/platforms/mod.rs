//! Models of what Envoy Gateway and Istio hand their Envoy for our manifests, with our
//! patches applied the way each platform applies them. Envoy then validates, or runs,
//! the result. The models cover only the parts of each translator that our manifests
//! use; each file says which release it follows.

pub mod envoy_gateway;
pub mod istio;
mod json_patch_ops;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde_json::{Value, json};

/// Where things run when the model is brought up on one machine.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The gateway listener's address (the Gateway's port, on loopback here).
    pub gateway: SocketAddr,
    /// Envoy's admin address.
    pub admin: SocketAddr,
    /// The pods behind each Service, by Service name: EDS in a cluster, static here.
    pub service_endpoints: BTreeMap<String, Vec<SocketAddr>>,
    /// Where the platform serves the module it fetched (Envoy Gateway's wasm cache).
    pub wasm_cache: SocketAddr,
}

pub(crate) fn socket_address(addr: SocketAddr) -> Value {
    json!({"socket_address": {"address": addr.ip().to_string(), "port_value": addr.port()}})
}

pub(crate) fn static_cluster(name: &str, endpoints: &[SocketAddr], extra: Value) -> Value {
    let lb_endpoints: Vec<Value> =
        endpoints.iter().map(|a| json!({"endpoint": {"address": socket_address(*a)}})).collect();
    let mut cluster = json!({
        "name": name,
        "type": "STATIC",
        "connect_timeout": "10s",
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": lb_endpoints}]},
    });
    if let (Some(cluster), Some(extra)) = (cluster.as_object_mut(), extra.as_object()) {
        cluster.extend(extra.clone());
    }
    cluster
}

/// The HTTPRoute's rules as Envoy routes; `cluster_of(rule index, backendRef)` names
/// each rule's cluster the way the platform does.
pub(crate) fn routes(route: &Value, cluster_of: &dyn Fn(usize, &Value) -> String, per_filter: &Value) -> Vec<Value> {
    let rules = route["spec"]["rules"].as_array().cloned().unwrap_or_default();
    rules
        .iter()
        .enumerate()
        .map(|(index, rule)| {
            let first_match = &rule["matches"][0];
            let mut route_match = json!({"prefix": first_match["path"]["value"].as_str().unwrap_or("/")});
            if let Some(headers) = first_match["headers"].as_array() {
                route_match["headers"] =
                    headers.iter().map(|h| json!({"name": h["name"], "string_match": {"exact": h["value"]}})).collect();
            }
            let mut action = json!({"cluster": cluster_of(index, &rule["backendRefs"][0])});
            if let Some(timeout) = rule["timeouts"]["request"].as_str() {
                action["timeout"] = json!(timeout);
            }
            json!({"match": route_match, "route": action, "typed_per_filter_config": per_filter})
        })
        .collect()
}

/// The document of `kind` among `documents`.
pub(crate) fn find<'a>(documents: &'a [Value], kind: &str) -> Result<&'a Value, String> {
    documents.iter().find(|d| d["kind"] == kind).ok_or_else(|| format!("no {kind} among the manifests"))
}

pub(crate) fn admin(addr: SocketAddr) -> Value {
    json!({"address": socket_address(addr)})
}

pub(crate) fn router_filter() -> Value {
    json!({"name": "envoy.filters.http.router", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}})
}

pub(crate) fn http_connection_manager(stat_prefix: &str, routes: Vec<Value>, http_filters: Vec<Value>) -> Value {
    json!({
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": stat_prefix,
            "route_config": {"name": stat_prefix, "virtual_hosts": [{"name": stat_prefix, "domains": ["*"], "routes": routes}]},
            "http_filters": http_filters,
        },
    })
}
