//! The InferencePool-native deployment, for gateways that implement the Gateway API
//! Inference Extension by calling an endpoint picker over ext_proc instead of loading a
//! filter (Istio, agentgateway, kgateway, NGINX Gateway Fabric, GKE):
//! - `infergate-epp` (a Deployment of two active-active pickers, its Service and its
//!   config) as the picker, and a headless Service listing every picker's control
//!   port for the agent;
//! - one `InferencePool` per pool: its pods by label, its target ports, and
//!   `endpointPickerRef` naming the picker (failure mode closed: no unrouted requests);
//! - an `HTTPRoute` whose rules send each model's requests to its pool's InferencePool,
//!   matched on `x-gateway-model-name` (set by a body-based router in front, as the
//!   Inference Extension's own deployments do), and everything else to the first pool.
//!
//! The agent pushes snapshots to every picker's control port (`--control-service`
//! naming [`PICKER_CONTROL`]), not to the gateway's pods: the gateway runs no infergate
//! code. The pickers share prefix records and loads through those pushes
//! (`epp/src/replicas.rs`), so the gateway may send a request's stream to either.

use infergate_core::config::InfergateConfig;
use infergate_core::wire::header::MODEL as MODEL_HEADER;
use serde_json::{Value, json};

use super::shared::{self, PlacedPool};
use super::{KubernetesOptions, RenderError};

/// The picker's Deployment and Service.
pub const PICKER: &str = "infergate-epp";
/// Its gRPC (ext_proc and health) port, the Inference Extension's usual one.
pub const PICKER_GRPC_PORT: u16 = 9002;
/// The headless Service the agent follows to push to every picker, ready or not (a
/// picker becomes ready only after its first push).
pub const PICKER_CONTROL: &str = "infergate-epp-control";
/// Pickers, active-active: one can stop (a rollout, a node drain) while the other serves.
pub const PICKER_REPLICAS: u32 = 2;
/// What a stopping picker waits, after saying it takes no new stream, before it stops
/// accepting connections: the gateway's health checks see it first.
const PICKER_DRAIN_MS: u64 = 5_000;
const INFERENCE_GROUP: &str = "inference.networking.k8s.io";

pub fn pool_name(pool: &str) -> String {
    format!("infergate-{pool}")
}

fn labels() -> Value {
    json!({"app.kubernetes.io/part-of": "infergate", "app.kubernetes.io/name": PICKER})
}

/// Everything to apply, in order: the picker's config, Deployment and Service, the
/// InferencePools, the HTTPRoute. `image`: the picker's container image.
pub fn render(config: &InfergateConfig, options: &KubernetesOptions, image: &str) -> Result<Vec<Value>, RenderError> {
    let pools = shared::placed_pools(config, options)?;
    let namespace = &options.namespace;
    let control_port = config.gateway.control.port();
    let yaml = serde_yaml_ng::to_string(config).map_err(|e| {
        RenderError::PluginConfig(crate::PluginConfigError { plugin: PICKER.to_string(), reason: e.to_string() })
    })?;
    let mut documents = vec![
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": PICKER, "namespace": namespace, "labels": labels()},
            "data": {"infergate.yaml": yaml},
        }),
        deployment(config, options, image, control_port),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": PICKER, "namespace": namespace, "labels": labels()},
            "spec": {
                "selector": {"app.kubernetes.io/name": PICKER},
                "ports": [
                    {"name": "grpc", "protocol": "TCP", "port": PICKER_GRPC_PORT, "targetPort": PICKER_GRPC_PORT, "appProtocol": "kubernetes.io/h2c"},
                ],
            },
        }),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": PICKER_CONTROL, "namespace": namespace, "labels": labels()},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": true,
                "selector": {"app.kubernetes.io/name": PICKER},
                "ports": [{"name": "control", "protocol": "TCP", "port": control_port, "targetPort": control_port}],
            },
        }),
    ];
    documents.extend(pools.iter().map(|placed| inference_pool(placed, namespace)));
    documents.push(http_route(config, &pools, options));
    Ok(documents)
}

fn deployment(config: &InfergateConfig, options: &KubernetesOptions, image: &str, control_port: u16) -> Value {
    // A stopping picker drains, then serves its open streams to their end: the longest
    // a request may take.
    let grace_s = (PICKER_DRAIN_MS + config.gateway.request_timeout_ms).div_ceil(1000) + 5;
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": PICKER, "namespace": options.namespace, "labels": labels()},
        "spec": {
            "replicas": PICKER_REPLICAS,
            "selector": {"matchLabels": {"app.kubernetes.io/name": PICKER}},
            "template": {
                "metadata": {"labels": labels()},
                "spec": {
                    "terminationGracePeriodSeconds": grace_s,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "picker",
                        "image": image,
                        "args": [
                            "-c", "/etc/infergate/infergate.yaml",
                            "--listen", format!("0.0.0.0:{PICKER_GRPC_PORT}"),
                            "--control", format!("0.0.0.0:{control_port}"),
                            "--token-file", "/var/run/infergate/token",
                            "--drain-ms", PICKER_DRAIN_MS.to_string(),
                        ],
                        "ports": [
                            {"name": "grpc", "containerPort": PICKER_GRPC_PORT},
                            {"name": "control", "containerPort": control_port},
                        ],
                        "readinessProbe": {"grpc": {"port": PICKER_GRPC_PORT, "service": "readiness"}},
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "control"}},
                        "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
                        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [
                            {"name": "config", "mountPath": "/etc/infergate", "readOnly": true},
                            {"name": "token", "mountPath": "/var/run/infergate", "readOnly": true},
                        ],
                    }],
                    "volumes": [
                        {"name": "config", "configMap": {"name": PICKER}},
                        {"name": "token", "secret": {"secretName": options.token_secret}},
                    ],
                },
            },
        },
    })
}

fn inference_pool(placed: &PlacedPool, namespace: &str) -> Value {
    let ports: Vec<Value> = placed.selector.target_ports.iter().map(|port| json!({"number": port})).collect();
    json!({
        "apiVersion": format!("{INFERENCE_GROUP}/v1"),
        "kind": "InferencePool",
        "metadata": {"name": pool_name(&placed.pool.name), "namespace": namespace, "labels": labels()},
        "spec": {
            "selector": {"matchLabels": placed.selector.match_labels},
            "targetPorts": ports,
            "endpointPickerRef": {
                "group": "", "kind": "Service", "name": PICKER,
                "port": {"number": PICKER_GRPC_PORT},
                "failureMode": "FailClose",
            },
        },
    })
}

fn http_route(config: &InfergateConfig, pools: &[PlacedPool], options: &KubernetesOptions) -> Value {
    let timeout = format!("{}s", config.gateway.request_timeout_ms.div_ceil(1000));
    let backend = |pool: &str| json!([{"group": INFERENCE_GROUP, "kind": "InferencePool", "name": pool_name(pool)}]);
    let mut rules: Vec<Value> = config
        .models
        .iter()
        .map(|model| {
            json!({
                "matches": [{"headers": [{"type": "Exact", "name": MODEL_HEADER, "value": model.name}]}],
                "backendRefs": backend(&model.pool),
                "timeouts": {"request": timeout},
            })
        })
        .collect();
    if let Some(first) = pools.first() {
        rules.push(json!({
            "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
            "backendRefs": backend(&first.pool.name),
            "timeouts": {"request": timeout},
        }));
    }
    let gateway = &options.gateway;
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": shared::ROUTE_NAME, "namespace": options.namespace, "labels": labels()},
        "spec": {
            "parentRefs": [{
                "group": "gateway.networking.k8s.io", "kind": "Gateway",
                "namespace": gateway.namespace, "name": gateway.name, "sectionName": gateway.listener,
            }],
            "rules": rules,
        },
    })
}
