//! Envoy Gateway v1.9, as its translator's golden files show it
//! (`internal/xds/translator/testdata/out/xds-ir/wasm.*.yaml`): each wasm entry of an
//! `EnvoyExtensionPolicy` is an HTTP filter named
//! `envoy.filters.http.wasm/envoyextensionpolicy/<ns>/<policy>/wasm/<i>`, disabled on the
//! listener and enabled on the targeted routes, with `vm_id` set to the same path and
//! the code fetched from Envoy Gateway's own wasm cache (`wasm_cluster`). Each HTTPRoute
//! rule is a cluster `httproute/<ns>/<route>/rule/<i>`, balanced by least request.
//! Then the `EnvoyPatchPolicy` patches the xDS resources (proto field names, an empty
//! `path` with `add` adds a whole resource) and the `EnvoyProxy` patches the bootstrap.

use serde_json::{Value, json};

use super::json_patch_ops;
use super::{Placement, admin, find, http_connection_manager, router_filter, routes, socket_address, static_cluster};

const WASM_CACHE_CLUSTER: &str = "wasm_cluster";

/// The bootstrap Envoy Gateway's Envoy would run, with every resource static.
pub fn bootstrap(documents: &[Value], placement: &Placement) -> Result<Value, String> {
    let route = find(documents, "HTTPRoute")?;
    let extension = find(documents, "EnvoyExtensionPolicy")?;
    let patch_policy = find(documents, "EnvoyPatchPolicy")?;
    let envoy_proxy = find(documents, "EnvoyProxy")?;

    let parent = &route["spec"]["parentRefs"][0];
    let route_namespace = route["metadata"]["namespace"].as_str().unwrap_or_default();
    let route_name = route["metadata"]["name"].as_str().unwrap_or_default();
    let listener_name = format!(
        "{}/{}/{}",
        parent["namespace"].as_str().unwrap_or(route_namespace),
        parent["name"].as_str().unwrap_or_default(),
        parent["sectionName"].as_str().unwrap_or_default()
    );

    let (filters, per_filter) = wasm_filters(extension, placement)?;
    let cluster_of = |index: usize, _: &Value| format!("httproute/{route_namespace}/{route_name}/rule/{index}");
    let mut http_filters = filters;
    http_filters.push(router_filter());
    let listener = json!({
        "name": listener_name,
        "address": socket_address(placement.gateway),
        "default_filter_chain": {"filters": [
            http_connection_manager(&listener_name, routes(route, &cluster_of, &per_filter), http_filters),
        ]},
    });

    let mut clusters: Vec<Value> = route["spec"]["rules"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(index, rule)| {
            let service = rule["backendRefs"][0]["name"].as_str().unwrap_or_default();
            let endpoints = placement.service_endpoints.get(service).cloned().unwrap_or_default();
            static_cluster(
                &cluster_of(index, &Value::Null),
                &endpoints,
                json!({"load_balancing_policy": {"policies": [{"typed_extension_config": {
                    "name": "envoy.load_balancing_policies.least_request",
                    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest"},
                }}]}}),
            )
        })
        .collect();
    clusters.push(static_cluster(WASM_CACHE_CLUSTER, &[placement.wasm_cache], json!({})));

    let mut resources = Resources { listeners: vec![listener], clusters };
    for patch in patch_policy["spec"]["jsonPatches"].as_array().cloned().unwrap_or_default() {
        resources.apply(&patch)?;
    }
    let mut bootstrap = json!({
        "node": {"id": "envoy-gateway-model", "cluster": "envoy-gateway-model"},
        "admin": admin(placement.admin),
        "static_resources": {"listeners": resources.listeners, "clusters": resources.clusters},
    });
    for operation in envoy_proxy["spec"]["bootstrap"]["jsonPatches"].as_array().cloned().unwrap_or_default() {
        json_patch_ops::apply(&mut bootstrap, &operation).map_err(|e| format!("EnvoyProxy bootstrap patch: {e}"))?;
    }
    Ok(bootstrap)
}

/// The policy's wasm entries as disabled filters, and the per-route config enabling them.
fn wasm_filters(policy: &Value, placement: &Placement) -> Result<(Vec<Value>, Value), String> {
    let namespace = policy["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = policy["metadata"]["name"].as_str().unwrap_or_default();
    let mut filters = Vec::new();
    let mut per_filter = serde_json::Map::new();
    for (index, wasm) in policy["spec"]["wasm"].as_array().cloned().unwrap_or_default().iter().enumerate() {
        let id = format!("envoyextensionpolicy/{namespace}/{name}/wasm/{index}");
        let filter_name = format!("envoy.filters.http.wasm/{id}");
        let sha256 = wasm["code"]["http"]["sha256"].as_str().ok_or("the model covers HTTP code only")?;
        let mut config = json!({
            "name": wasm["name"],
            "root_id": wasm["rootID"],
            "configuration": {"@type": "type.googleapis.com/google.protobuf.StringValue", "value": wasm["config"].to_string()},
            "vm_config": {
                "vm_id": id,
                "runtime": "envoy.wasm.runtime.v8",
                "code": {"remote": {
                    "http_uri": {"uri": format!("http://{}/{sha256}.wasm", placement.wasm_cache), "cluster": WASM_CACHE_CLUSTER, "timeout": "10s"},
                    "sha256": sha256,
                }},
            },
        });
        if wasm["failOpen"] == true {
            config["fail_open"] = json!(true);
        }
        if let Some(keys) = wasm["env"]["hostKeys"].as_array() {
            config["vm_config"]["environment_variables"] = json!({"host_env_keys": keys});
        }
        filters.push(json!({
            "name": filter_name,
            "disabled": true,
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm", "config": config},
        }));
        per_filter.insert(
            filter_name,
            json!({"@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig", "config": {}}),
        );
    }
    Ok((filters, Value::Object(per_filter)))
}

struct Resources {
    listeners: Vec<Value>,
    clusters: Vec<Value>,
}

impl Resources {
    fn apply(&mut self, patch: &Value) -> Result<(), String> {
        let name = patch["name"].as_str().unwrap_or_default();
        let list = match patch["type"].as_str() {
            Some("type.googleapis.com/envoy.config.listener.v3.Listener") => &mut self.listeners,
            Some("type.googleapis.com/envoy.config.cluster.v3.Cluster") => &mut self.clusters,
            other => return Err(format!("the model does not patch {other:?}")),
        };
        let operation = &patch["operation"];
        let whole = operation["path"].as_str().unwrap_or_default().is_empty() && operation["jsonPath"].is_null();
        if operation["op"] == "add" && whole {
            list.push(operation["value"].clone());
            return Ok(());
        }
        let resource = list
            .iter_mut()
            .find(|r| r["name"] == name)
            .ok_or_else(|| format!("EnvoyPatchPolicy: no resource named {name}"))?;
        json_patch_ops::apply(resource, operation).map_err(|e| format!("EnvoyPatchPolicy on {name}: {e}"))
    }
}
