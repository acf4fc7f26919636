//! A pool's pods, selected by label: each Ready pod that is not terminating
//! contributes `pod_ip:port` for each target port.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use infergate_core::Endpoint;
use infergate_core::config::{PodRole, PodSelector};
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
    role_label: Option<String>,
    updates: mpsc::UnboundedSender<PoolEndpoints>,
) {
    let api: Api<Pod> = Api::namespaced(client, &selector.namespace);
    let config = watcher::Config::default().labels(&selector.label_selector());
    let what = format!("pods of pool {pool} ({} in {})", selector.label_selector(), selector.namespace);
    let mut last: Option<BTreeMap<Endpoint, PodRole>> = None;
    follow(api, config, &what, |pods: &BTreeMap<String, Pod>| {
        let endpoints: BTreeMap<Endpoint, PodRole> = pods
            .values()
            .flat_map(|pod| {
                let role = pod_role(pod, role_label.as_deref());
                serving_endpoints(pod, &selector.target_ports).into_iter().map(move |e| (e, role))
            })
            .collect();
        if last.as_ref() == Some(&endpoints) {
            return true;
        }
        tracing::info!(pool = %pool, pods = endpoints.len(), "pool membership changed");
        last = Some(endpoints.clone());
        updates.send(PoolEndpoints { pool: pool.clone(), endpoints }).is_ok()
    })
    .await;
}

/// What a pod does in a disaggregated pool, from its `label` (llm-d's
/// `llm-d.ai/role: prefill | decode | both`); `both` without the label, and, logged, for
/// a value that names no role.
pub fn pod_role(pod: &Pod, label: Option<&str>) -> PodRole {
    let Some(label) = label else { return PodRole::Both };
    let Some(value) = pod.metadata.labels.as_ref().and_then(|labels| labels.get(label)) else {
        return PodRole::Both;
    };
    PodRole::from_label(value).unwrap_or_else(|| {
        let name = pod.metadata.name.as_deref().unwrap_or("?");
        tracing::warn!(pod = name, label, value = %value, "unknown role label value (expected prefill, decode or both); the pod does both");
        PodRole::Both
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn labelled(labels: &[(&str, &str)]) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        pod
    }

    #[test]
    fn the_role_label_gives_the_role() {
        let label = Some("llm-d.ai/role");
        assert_eq!(pod_role(&labelled(&[("llm-d.ai/role", "prefill")]), label), PodRole::Prefill);
        assert_eq!(pod_role(&labelled(&[("llm-d.ai/role", "decode")]), label), PodRole::Decode);
        assert_eq!(pod_role(&labelled(&[("llm-d.ai/role", "both")]), label), PodRole::Both);
        assert_eq!(pod_role(&labelled(&[("app", "x")]), label), PodRole::Both, "no label: both");
        assert_eq!(pod_role(&labelled(&[("llm-d.ai/role", "encode")]), label), PodRole::Both, "unknown value");
        assert_eq!(pod_role(&labelled(&[("llm-d.ai/role", "decode")]), None), PodRole::Both, "not disaggregated");
    }
}
