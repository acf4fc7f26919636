//! A pool's pods, selected by label: each Ready pod that is not terminating
//! contributes `pod_ip:port` for each target port.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use infergate_core::Endpoint;
use infergate_core::config::PodSelector;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::mpsc;

use super::watch::follow;
use crate::discovery::PoolEndpoints;

/// Reports the pool's endpoints after every change until the receiver is gone.
pub async fn follow_pods(
    client: Client,
    pool: String,
    selector: PodSelector,
    updates: mpsc::UnboundedSender<PoolEndpoints>,
) {
    let api: Api<Pod> = Api::namespaced(client, &selector.namespace);
    let config = watcher::Config::default().labels(&selector.label_selector());
    let what = format!("pods of pool {pool} ({} in {})", selector.label_selector(), selector.namespace);
    let mut last: Option<BTreeSet<Endpoint>> = None;
    follow(api, config, &what, |pods: &BTreeMap<String, Pod>| {
        let endpoints: BTreeSet<Endpoint> =
            pods.values().flat_map(|pod| serving_endpoints(pod, &selector.target_ports)).collect();
        if last.as_ref() == Some(&endpoints) {
            return true;
        }
        tracing::info!(pool = %pool, pods = endpoints.len(), "pool membership changed");
        last = Some(endpoints.clone());
        updates.send(PoolEndpoints { pool: pool.clone(), endpoints }).is_ok()
    })
    .await;
}

/// The addresses a pod serves on, or none if it should not get traffic: not Ready,
/// terminating, or without an IP yet.
pub fn serving_endpoints(pod: &Pod, ports: &[u16]) -> Vec<Endpoint> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    let Some(status) = &pod.status else { return Vec::new() };
    let ready =
        status.conditions.iter().flatten().any(|condition| condition.type_ == "Ready" && condition.status == "True");
    let ip: Option<IpAddr> = status.pod_ip.as_deref().and_then(|ip| ip.parse().ok());
    match ip {
        Some(ip) if ready => ports.iter().map(|&port| Endpoint::new(SocketAddr::new(ip, port))).collect(),
        _ => Vec::new(),
    }
}
