//! Istio 1.2x with a Gateway API `Gateway`: the gateway listener is `0.0.0.0_<port>`
//! with the router last in its HTTP filters, and each Service port is a cluster
//! `outbound|<port>||<service>.<ns>.svc.cluster.local`, balanced by `lb_policy:
//! LEAST_REQUEST` (Istio's default). `EnvoyFilter` patches apply as Istio applies them:
//! MERGE is a protobuf merge (messages merge, lists append, scalars replace),
//! INSERT_BEFORE places an HTTP filter before the one matched, ADD adds a listener, a
//! cluster or an extension config. An extension config is served over ECDS in a
//! cluster; in the static model, the filter that refers to it gets its config inline.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{Placement, admin, find, http_connection_manager, router_filter, routes, socket_address, static_cluster};

/// The bootstrap Istio's gateway Envoy would run, with every resource static.
pub fn bootstrap(documents: &[Value], placement: &Placement) -> Result<Value, String> {
    let route = find(documents, "HTTPRoute")?;
    let envoy_filter = find(documents, "EnvoyFilter")?;
    let namespace = route["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let host = |service: &str| format!("{service}.{namespace}.svc.cluster.local");
    let cluster_of = |_: usize, backend: &Value| {
        format!("outbound|{}||{}", backend["port"], host(backend["name"].as_str().unwrap_or_default()))
    };
    let port = placement.gateway.port();
    let listener = json!({
        "name": format!("0.0.0.0_{port}"),
        "address": socket_address(placement.gateway),
        "filter_chains": [{"filters": [
            http_connection_manager(&format!("http.{port}"), routes(route, &cluster_of, &json!({})), vec![router_filter()]),
        ]}],
    });
    let mut clusters = Vec::new();
    for rule in route["spec"]["rules"].as_array().cloned().unwrap_or_default() {
        let backend = &rule["backendRefs"][0];
        let name = cluster_of(0, backend);
        if clusters.iter().any(|c: &Value| c["name"] == name) {
            continue;
        }
        let endpoints = placement.service_endpoints.get(backend["name"].as_str().unwrap_or_default()).cloned();
        clusters.push(static_cluster(&name, &endpoints.unwrap_or_default(), json!({"lb_policy": "LEAST_REQUEST"})));
    }
    let mut model = Model {
        bootstrap: json!({
            "node": {"id": "istio-model", "cluster": "istio-model"},
            "admin": admin(placement.admin),
            "static_resources": {"listeners": [], "clusters": []},
        }),
        listeners: vec![listener],
        clusters,
        extension_configs: HashMap::new(),
    };
    for patch in envoy_filter["spec"]["configPatches"].as_array().cloned().unwrap_or_default() {
        model.apply(&patch)?;
    }
    model.finish()
}

struct Model {
    bootstrap: Value,
    listeners: Vec<Value>,
    clusters: Vec<Value>,
    extension_configs: HashMap<String, Value>,
}

fn listener_port(listener: &Value) -> Option<u64> {
    listener["address"]["socket_address"]["port_value"].as_u64()
}

impl Model {
    fn apply(&mut self, patch: &Value) -> Result<(), String> {
        let operation = patch["patch"]["operation"].as_str().unwrap_or_default();
        let value = patch["patch"]["value"].clone();
        let matched = &patch["match"];
        match (patch["applyTo"].as_str().unwrap_or_default(), operation) {
            ("EXTENSION_CONFIG", "ADD") => {
                let name = value["name"].as_str().ok_or("an extension config without a name")?.to_string();
                self.extension_configs.insert(name, value["typed_config"].clone());
            }
            ("LISTENER", "ADD") => self.listeners.push(value),
            ("LISTENER", "MERGE") => {
                for listener in self.listeners_matching(matched)? {
                    merge(listener, &value);
                }
            }
            ("HTTP_FILTER", "INSERT_BEFORE") => {
                let before = matched["listener"]["filterChain"]["filter"]["subFilter"]["name"]
                    .as_str()
                    .ok_or("HTTP_FILTER patch without a subFilter to insert before")?
                    .to_string();
                for listener in self.listeners_matching(matched)? {
                    let filters = &mut listener["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"];
                    let list = filters.as_array_mut().ok_or("no http_filters")?;
                    let index = list.iter().position(|f| f["name"] == before.as_str()).ok_or("no such filter")?;
                    list.insert(index, value.clone());
                }
            }
            ("CLUSTER", "MERGE") => {
                let name = format!(
                    "outbound|{}||{}",
                    matched["cluster"]["portNumber"],
                    matched["cluster"]["service"].as_str().unwrap_or_default()
                );
                let cluster = self
                    .clusters
                    .iter_mut()
                    .find(|c| c["name"] == name.as_str())
                    .ok_or_else(|| format!("EnvoyFilter: no cluster {name}"))?;
                merge(cluster, &value);
            }
            ("CLUSTER", "ADD") => self.clusters.push(value),
            ("BOOTSTRAP", "MERGE") => merge(&mut self.bootstrap, &value),
            (apply_to, operation) => return Err(format!("the model does not apply {operation} to {apply_to}")),
        }
        Ok(())
    }

    fn listeners_matching(&mut self, matched: &Value) -> Result<Vec<&mut Value>, String> {
        let port = matched["listener"]["portNumber"].as_u64();
        let found: Vec<&mut Value> =
            self.listeners.iter_mut().filter(|l| port.is_none_or(|p| listener_port(l) == Some(p))).collect();
        if found.is_empty() {
            return Err(format!("EnvoyFilter: no listener on port {port:?}"));
        }
        Ok(found)
    }

    fn finish(mut self) -> Result<Value, String> {
        for listener in &mut self.listeners {
            let Some(chains) = listener["filter_chains"].as_array_mut() else { continue };
            for chain in chains {
                let Some(filters) = chain["filters"][0]["typed_config"]["http_filters"].as_array_mut() else {
                    continue;
                };
                for filter in filters.iter_mut().filter(|f| !f["config_discovery"].is_null()) {
                    let name = filter["name"].as_str().unwrap_or_default().to_string();
                    let config =
                        self.extension_configs.get(&name).ok_or_else(|| format!("no extension config {name}"))?;
                    *filter = json!({"name": name, "typed_config": config});
                }
            }
        }
        let resources = &mut self.bootstrap["static_resources"];
        merge(resources, &json!({"listeners": self.listeners, "clusters": self.clusters}));
        Ok(self.bootstrap)
    }
}

/// Protobuf merge on JSON: objects merge field by field, lists append, the rest replaces.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                match target.get_mut(key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        target.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (Value::Array(target), Value::Array(patch)) => target.extend(patch.iter().cloned()),
        (target, patch) => *target = patch.clone(),
    }
}
