//! The gateway's replicas: the ready endpoints of the control Service that
//! `infergate-envoy-config` renders next to the gateway pods. A push through the
//! Service reaches one replica, and the others would route on signals that age until
//! they fall back to in-flight counts; so the agent reads the Service's EndpointSlices
//! and pushes to every ready endpoint itself.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::watch;

use super::NamespacedName;
use super::watch::follow;

/// The port name `infergate-envoy-config` gives the control Service's one port.
const CONTROL_PORT_NAME: &str = "control";

/// The control listeners to push to, as base URLs (`http://10.0.3.7:9902`), sorted.
pub type ControlEndpoints = BTreeSet<String>;

/// Sends the Service's ready endpoints after every change, until the receiver is gone.
/// Until the first list arrives nothing is sent, so the agent pushes nowhere.
pub async fn follow_control_service(
    client: Client,
    service: NamespacedName,
    updates: watch::Sender<Option<ControlEndpoints>>,
) {
    let api: Api<EndpointSlice> = Api::namespaced(client, &service.namespace);
    let config = watcher::Config::default().labels(&format!("kubernetes.io/service-name={}", service.name));
    let what = format!("endpoints of Service {service}");
    follow(api, config, &what, |slices: &BTreeMap<String, EndpointSlice>| {
        let endpoints: ControlEndpoints = slices.values().flat_map(ready_control_endpoints).collect();
        if updates.borrow().as_ref() != Some(&endpoints) {
            tracing::info!(service = %service, gateways = endpoints.len(), "gateway replicas changed");
            updates.send_replace(Some(endpoints));
        }
        !updates.is_closed()
    })
    .await;
}

/// The base URLs of one slice's ready endpoints on the control port. An endpoint
/// whose `ready` is unset counts as ready, as the EndpointSlice API says it should.
pub fn ready_control_endpoints(slice: &EndpointSlice) -> Vec<String> {
    let Some(port) = control_port(slice) else {
        let name = slice.metadata.name.as_deref().unwrap_or("?");
        tracing::warn!(
            slice = name,
            "EndpointSlice has no port named {CONTROL_PORT_NAME:?} nor a single port; skipped"
        );
        return Vec::new();
    };
    slice
        .endpoints
        .iter()
        .filter(|endpoint| endpoint.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|endpoint| &endpoint.addresses)
        .filter_map(|address| address.parse::<IpAddr>().ok())
        .map(|ip| format!("http://{}", SocketAddr::new(ip, port)))
        .collect()
}

/// The port named `control`, or the slice's only port.
fn control_port(slice: &EndpointSlice) -> Option<u16> {
    let ports = slice.ports.as_deref().unwrap_or_default();
    let port = match ports {
        [only] => only,
        _ => ports.iter().find(|p| p.name.as_deref() == Some(CONTROL_PORT_NAME))?,
    };
    port.port.and_then(|p| u16::try_from(p).ok()).filter(|&p| p != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(address_type: &str, ports: serde_json::Value, endpoints: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": "infergate-control-abcde"},
            "addressType": address_type,
            "ports": ports,
            "endpoints": endpoints,
        }))
        .unwrap()
    }

    #[test]
    fn ready_and_unknown_endpoints_count_and_not_ready_ones_do_not() {
        let endpoints = json!([
            {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
            {"addresses": ["10.0.0.2"], "conditions": {}},
            {"addresses": ["10.0.0.3"]},
            {"addresses": ["10.0.0.4"], "conditions": {"ready": false, "terminating": true}},
        ]);
        let found = ready_control_endpoints(&slice("IPv4", json!([{"name": "control", "port": 9902}]), endpoints));
        assert_eq!(found, ["http://10.0.0.1:9902", "http://10.0.0.2:9902", "http://10.0.0.3:9902"]);
    }

    #[test]
    fn the_port_is_the_one_named_control_or_the_only_one() {
        let one = json!([{"addresses": ["fd00::7"]}]);
        let named = json!([{"name": "admin", "port": 9901}, {"name": "control", "port": 9902}]);
        assert_eq!(ready_control_endpoints(&slice("IPv6", named, one.clone())), ["http://[fd00::7]:9902"]);
        let unnamed = json!([{"port": 7000}]);
        assert_eq!(ready_control_endpoints(&slice("IPv6", unnamed, one.clone())), ["http://[fd00::7]:7000"]);
        let ambiguous = json!([{"name": "a", "port": 1}, {"name": "b", "port": 2}]);
        assert!(ready_control_endpoints(&slice("IPv6", ambiguous, one.clone())).is_empty());
        assert!(ready_control_endpoints(&slice("IPv6", json!([]), one)).is_empty());
    }

    #[test]
    fn names_that_are_not_addresses_are_skipped() {
        let fqdn = json!([{"addresses": ["gateway.example.com"]}]);
        assert!(ready_control_endpoints(&slice("FQDN", json!([{"port": 9902}]), fqdn)).is_empty());
    }
}
