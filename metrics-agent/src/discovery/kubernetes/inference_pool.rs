//! A pool defined by a Gateway API Inference Extension `InferencePool`
//! (`inference.networking.k8s.io/v1`): its label selector and target ports are read
//! from the cluster, and followed, so that editing the InferencePool moves the pool.

use std::collections::BTreeMap;

use infergate_core::config::{InferencePoolRef, PodSelector};
use kube::runtime::watcher;
use kube::{Api, Client, CustomResource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::pods::follow_pods;
use super::watch::follow;
use crate::discovery::PoolEndpoints;

/// The parts of the InferencePool spec that define its members. Other fields, such as
/// `endpointPickerRef`, are ignored: infergate is the endpoint picker.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(group = "inference.networking.k8s.io", version = "v1", kind = "InferencePool", namespaced)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolSpec {
    pub selector: LabelSelector,
    pub target_ports: Vec<TargetPort>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TargetPort {
    pub number: i32,
}

impl InferencePoolSpec {
    /// The equivalent pod selector; ports outside 1..=65535 are dropped (the CRD
    /// forbids them, so only a hand-made object could carry them).
    pub fn pod_selector(&self, namespace: &str) -> PodSelector {
        PodSelector {
            namespace: namespace.to_string(),
            match_labels: self.selector.match_labels.clone(),
            target_ports: self
                .target_ports
                .iter()
                .filter_map(|p| u16::try_from(p.number).ok().filter(|&port| port > 0))
                .collect(),
        }
    }
}

/// Follows the InferencePool, and its pods with its current selector.
pub async fn follow_inference_pool(
    client: Client,
    pool: String,
    reference: InferencePoolRef,
    role_label: Option<String>,
    updates: mpsc::UnboundedSender<PoolEndpoints>,
) {
    let api: Api<InferencePool> = Api::namespaced(client.clone(), &reference.namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", reference.name));
    let what = format!("InferencePool {}/{}", reference.namespace, reference.name);
    let mut following: Option<(InferencePoolSpec, JoinHandle<()>)> = None;
    follow(api, config, &what, |found: &BTreeMap<String, InferencePool>| {
        let spec = found.get(&reference.name).map(|p| p.spec.clone());
        if following.as_ref().map(|(s, _)| s) == spec.as_ref() {
            return true;
        }
        if let Some((_, task)) = following.take() {
            task.abort();
        }
        match spec {
            Some(spec) => {
                let selector = spec.pod_selector(&reference.namespace);
                tracing::info!(pool = %pool, inference_pool = %what, selector = %selector.label_selector(), ports = ?selector.target_ports, "following the InferencePool's pods");
                let task = tokio::spawn(follow_pods(client.clone(), pool.clone(), selector, role_label.clone(), updates.clone()));
                following = Some((spec, task));
                true
            }
            None => {
                tracing::warn!(pool = %pool, inference_pool = %what, "the InferencePool is gone; the pool has no discovered pods");
                updates.send(PoolEndpoints { pool: pool.clone(), endpoints: BTreeMap::new() }).is_ok()
            }
        }
    })
    .await;
    if let Some((_, task)) = following {
        task.abort();
    }
}
