//! The `InferenceGatewayConfig` custom resource (`infergate.io/v1alpha1`): the whole
//! `infergate.yaml` as a Kubernetes object. Its spec has exactly the file's schema, so
//! one document works in both places. The agent follows one such object; each valid
//! change reaches the filters in the next snapshot, without an Envoy reload.

use std::collections::BTreeMap;
use std::sync::Arc;

use infergate_core::config::InfergateConfig;
use kube::runtime::watcher;
use kube::{Api, Client, CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::NamespacedName;
use super::watch::follow;

#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infergate.io",
    version = "v1alpha1",
    kind = "InferenceGatewayConfig",
    namespaced,
    shortname = "igc",
    doc = "infergate's gateway, agent and routing configuration: the schema of infergate.yaml"
)]
pub struct InferenceGatewayConfigSpec {
    #[serde(flatten)]
    pub config: InfergateConfig,
}

/// The CRD manifest to apply to a cluster, as YAML.
pub fn crd_yaml() -> Result<String, serde_yaml_ng::Error> {
    serde_yaml_ng::to_string(&InferenceGatewayConfig::crd())
}

/// Sends each valid version of the object's spec. An invalid spec is logged with the
/// failing field and the running config is kept.
pub async fn follow_config(
    client: Client,
    resource: NamespacedName,
    sender: watch::Sender<Option<Arc<InfergateConfig>>>,
) {
    let api: Api<InferenceGatewayConfig> = Api::namespaced(client, &resource.namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", resource.name));
    let what = format!("InferenceGatewayConfig {resource}");
    follow(api, config, &what, |found: &BTreeMap<String, InferenceGatewayConfig>| {
        match found.get(&resource.name) {
            Some(object) => match object.spec.config.validate() {
                Ok(()) => {
                    let config = Arc::new(object.spec.config.clone());
                    if sender.borrow().as_ref() != Some(&config) {
                        tracing::info!(resource = %resource, generation = ?object.metadata.generation, "config changed; the next snapshot carries it");
                        sender.send_replace(Some(config));
                    }
                }
                Err(e) => {
                    tracing::error!(resource = %resource, error = %e, "the InferenceGatewayConfig is invalid; keeping the running config");
                }
            },
            None => tracing::warn!(resource = %resource, "the InferenceGatewayConfig is gone; keeping the running config"),
        }
        !sender.is_closed()
    })
    .await;
}
