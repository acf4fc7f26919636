//! Kubernetes discovery: one follower task per pool that has a `discovery` source,
//! restarted when that source changes in the config; the config resource; and the
//! gateway replicas behind the control Service.

mod control_service;
mod gateway_config;
mod inference_pool;
mod name;
mod pods;
mod watch;

use std::collections::HashMap;
use std::sync::Arc;

use infergate_core::config::{Discovery, DiscoverySource, InfergateConfig};
use kube::Client;
use tokio::sync::{mpsc, watch as channel};
use tokio::task::JoinHandle;

pub use control_service::{ControlEndpoints, follow_control_service};
pub use gateway_config::{InferenceGatewayConfig, InferenceGatewayConfigSpec, crd_yaml, follow_config};
pub use inference_pool::{InferencePool, InferencePoolSpec};
pub use name::NamespacedName;
pub use pods::serving_endpoints;

use crate::discovery::PoolEndpoints;

/// What a pool's follower follows: its discovery source, and the label that gives each
/// pod's role when the pool is disaggregated.
type Followed = (Discovery, Option<String>);

/// Keeps one follower per discovered pool in step with the config, until the config
/// channel closes. A pool that loses its discovery source reports no pods.
pub async fn follow_pools(
    client: Client,
    mut configs: channel::Receiver<Arc<InfergateConfig>>,
    updates: mpsc::UnboundedSender<PoolEndpoints>,
) {
    let mut running: HashMap<String, (Followed, JoinHandle<()>)> = HashMap::new();
    loop {
        let config = Arc::clone(&configs.borrow_and_update());
        let wanted: HashMap<&str, Followed> = config
            .pools
            .iter()
            .filter_map(|p| {
                let role_label = p.disaggregation.as_ref().map(|d| d.role_label.clone());
                p.discovery.clone().map(|d| (p.name.as_str(), (d, role_label)))
            })
            .collect();
        running.retain(|pool, (followed, task)| {
            let keep = wanted.get(pool.as_str()) == Some(&*followed);
            if !keep {
                task.abort();
                let _ = updates.send(PoolEndpoints { pool: pool.clone(), endpoints: Default::default() });
            }
            keep
        });
        for (&pool, followed) in &wanted {
            if running.contains_key(pool) {
                continue;
            }
            let (discovery, role_label) = followed;
            let (client, name, updates) = (client.clone(), pool.to_string(), updates.clone());
            let roles = role_label.clone();
            let task = match discovery.source() {
                Some(DiscoverySource::Pods(selector)) => {
                    tokio::spawn(pods::follow_pods(client, name, selector.clone(), roles, updates))
                }
                Some(DiscoverySource::InferencePool(reference)) => {
                    tokio::spawn(inference_pool::follow_inference_pool(client, name, reference.clone(), roles, updates))
                }
                None => continue,
            };
            running.insert(pool.to_string(), (followed.clone(), task));
        }
        if configs.changed().await.is_err() {
            break;
        }
    }
    for (_, (_, task)) in running {
        task.abort();
    }
}
