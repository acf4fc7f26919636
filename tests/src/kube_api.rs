//! A stand-in for the Kubernetes API server that answers list and watch requests with
//! JSON in the exact shape the real one sends: `PodList`-style lists with a
//! `resourceVersion`, and watches as newline-delimited `WatchEvent`s (`ADDED`,
//! `MODIFIED`, `DELETED`, `BOOKMARK`, and `ERROR` with a 410 `Status`). The test
//! scripts what each list returns and feeds watch events as it goes; every request
//! is recorded so that the test can check what the client asked for.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// One collection, e.g. `/api/v1/namespaces/default/pods`.
#[derive(Default)]
struct Collection {
    /// What the next list calls return, in order.
    lists: VecDeque<Value>,
    /// The last list returned, repeated when nothing new is queued.
    last_list: Option<Value>,
    /// The open watch stream, if any.
    watch: Option<mpsc::UnboundedSender<Result<Bytes, std::io::Error>>>,
    watches_opened: usize,
}

#[derive(Default)]
struct Inner {
    collections: HashMap<String, Collection>,
    requests: Vec<String>,
}

#[derive(Clone, Default)]
pub struct FakeApiServer {
    inner: Arc<Mutex<Inner>>,
}

pub struct RunningApiServer {
    pub url: String,
    pub server: FakeApiServer,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RunningApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeApiServer {
    /// Queues the answer to the next list of `collection` (a path without query).
    pub fn queue_list(&self, collection: &str, list: Value) {
        let mut inner = self.inner.lock().unwrap();
        inner.collections.entry(collection.to_string()).or_default().lists.push_back(list);
    }

    /// Sends one event on the collection's open watch; false if none is open.
    pub fn send_event(&self, collection: &str, event: Value) -> bool {
        let inner = self.inner.lock().unwrap();
        let Some(watch) = inner.collections.get(collection).and_then(|c| c.watch.as_ref()) else {
            return false;
        };
        watch.send(Ok(Bytes::from(format!("{event}\n")))).is_ok()
    }

    /// Ends the collection's open watch, as the API server does at its timeout.
    pub fn close_watch(&self, collection: &str) {
        let mut inner = self.inner.lock().unwrap();
        if let Some(c) = inner.collections.get_mut(collection) {
            c.watch = None;
        }
    }

    pub fn watches_opened(&self, collection: &str) -> usize {
        self.inner.lock().unwrap().collections.get(collection).map_or(0, |c| c.watches_opened)
    }

    /// Every request so far, as `path?query`.
    pub fn requests(&self) -> Vec<String> {
        self.inner.lock().unwrap().requests.clone()
    }

    /// Waits until a watch of `collection` is open (the watcher listed first).
    pub async fn wait_for_watch(&self, collection: &str, count: usize) {
        for _ in 0..500 {
            if self.watches_opened(collection) >= count
                && self.inner.lock().unwrap().collections.get(collection).is_some_and(|c| c.watch.is_some())
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no watch #{count} of {collection} was opened; requests: {:#?}", self.requests());
    }

    pub async fn start(self) -> RunningApiServer {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new().fallback(answer).with_state(self.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RunningApiServer { url, server: self, task }
    }
}

async fn answer(State(server): State<FakeApiServer>, request: Request) -> Response {
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or_default().to_string();
    let watching = query.split('&').any(|pair| pair == "watch=true" || pair == "watch=1");
    let mut inner = server.inner.lock().unwrap();
    inner.requests.push(format!("{path}?{query}"));
    let Some(collection) = inner.collections.get_mut(&path) else {
        return (StatusCode::NOT_FOUND, axum::Json(status_failure(404, "NotFound", &format!("{path} not found"))))
            .into_response();
    };
    if watching {
        let (sender, receiver) = mpsc::unbounded_channel();
        collection.watch = Some(sender);
        collection.watches_opened += 1;
        let stream = tokio_stream_from(receiver);
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from_stream(stream))
            .unwrap_or_default();
    }
    if let Some(next) = collection.lists.pop_front() {
        collection.last_list = Some(next);
    }
    match collection.last_list.clone() {
        Some(list) => axum::Json(list).into_response(),
        None => (StatusCode::INTERNAL_SERVER_ERROR, "no list queued").into_response(),
    }
}

fn tokio_stream_from(
    mut receiver: mpsc::UnboundedReceiver<Result<Bytes, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx)).boxed()
}

/// A `Status` object, as the API server sends with failures.
pub fn status_failure(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

/// A list response: `kind` is e.g. `PodList`.
pub fn list(kind: &str, api_version: &str, resource_version: &str, items: Vec<Value>) -> Value {
    json!({
        "kind": kind,
        "apiVersion": api_version,
        "metadata": {"resourceVersion": resource_version},
        "items": items,
    })
}

/// A watch event line.
pub fn event(kind: &str, object: Value) -> Value {
    json!({"type": kind, "object": object})
}

/// The `BOOKMARK` event the API server sends for pods: only the resource version is
/// meaningful; `spec` and `status` are empty objects.
pub fn pod_bookmark(resource_version: &str) -> Value {
    json!({
        "type": "BOOKMARK",
        "object": {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": resource_version, "creationTimestamp": null},
            "spec": {"containers": null},
            "status": {}
        }
    })
}

/// The event that ends a watch whose resource version has been compacted away.
pub fn gone(resource_version: &str) -> Value {
    event("ERROR", status_failure(410, "Expired", &format!("too old resource version: {resource_version} (9000)")))
}

/// A model-server pod as the API server returns it: running on `ip`, with its
/// Ready condition, or terminating when `deleting` is set.
pub fn pod(name: &str, labels: Value, ip: &str, ready: bool, deleting: bool, resource_version: &str) -> Value {
    let condition = |kind: &str, status: bool| {
        json!({
            "type": kind,
            "status": if status { "True" } else { "False" },
            "lastProbeTime": null,
            "lastTransitionTime": "2026-11-29T10:00:00Z"
        })
    };
    let mut metadata = json!({
        "name": name,
        "generateName": "vllm-llama-7d9f8b6c5-",
        "namespace": "default",
        "uid": format!("6f1c2a3e-0000-4000-8000-{:012}", name.len() * 7919 + resource_version.len()),
        "resourceVersion": resource_version,
        "creationTimestamp": "2026-11-29T09:58:00Z",
        "labels": labels,
        "ownerReferences": [{
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "vllm-llama-7d9f8b6c5",
            "uid": "0b7e4f1a-1111-4222-8333-444455556666",
            "controller": true,
            "blockOwnerDeletion": true
        }]
    });
    if deleting {
        metadata["deletionTimestamp"] = json!("2026-11-29T10:05:00Z");
        metadata["deletionGracePeriodSeconds"] = json!(30);
    }
    json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": metadata,
        "spec": {
            "containers": [{
                "name": "vllm",
                "image": "vllm/vllm-openai:v0.11.0",
                "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct"],
                "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent"
            }],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": "gpu-node-1",
            "schedulerName": "default-scheduler"
        },
        "status": {
            "phase": "Running",
            "conditions": [
                condition("PodReadyToStartContainers", true),
                condition("Initialized", true),
                condition("Ready", ready),
                condition("ContainersReady", ready),
                condition("PodScheduled", true)
            ],
            "hostIP": "192.168.49.2",
            "hostIPs": [{"ip": "192.168.49.2"}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": "2026-11-29T09:58:01Z",
            "qosClass": "BestEffort"
        }
    })
}

/// One endpoint of an EndpointSlice: a gateway pod's address and its conditions
/// (`ready: false` with `terminating: true` while it shuts down).
#[derive(Debug, Clone, Copy)]
pub struct SliceEndpoint<'a> {
    pub ip: &'a str,
    pub pod: &'a str,
    pub ready: bool,
    pub terminating: bool,
}

/// An EndpointSlice of a Service with one TCP port, as the EndpointSlice controller
/// writes it.
pub fn endpoint_slice(
    service: &str,
    namespace: &str,
    port: (&str, u16),
    endpoints: &[SliceEndpoint],
    resource_version: &str,
) -> Value {
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|e| {
            json!({
                "addresses": [e.ip],
                "conditions": {"ready": e.ready, "serving": !e.terminating || e.ready, "terminating": e.terminating},
                "nodeName": "gpu-node-1",
                "targetRef": {"kind": "Pod", "namespace": namespace, "name": e.pod,
                              "uid": format!("7a2b3c4d-0000-4000-8000-{:012}", e.pod.len() * 104_729)},
                "zone": "us-east-1a"
            })
        })
        .collect();
    json!({
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": {
            "name": format!("{service}-x7k2p"),
            "generateName": format!("{service}-"),
            "namespace": namespace,
            "uid": "5c6d7e8f-9999-4aaa-8bbb-cccc0000dddd",
            "resourceVersion": resource_version,
            "generation": 3,
            "creationTimestamp": "2026-11-29T09:58:00Z",
            "labels": {
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                "kubernetes.io/service-name": service
            },
            "ownerReferences": [{
                "apiVersion": "v1",
                "kind": "Service",
                "name": service,
                "uid": "2d3e4f50-aaaa-4bbb-8ccc-dddd11112222",
                "controller": true,
                "blockOwnerDeletion": true
            }]
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": port.0, "protocol": "TCP", "port": port.1}]
    })
}

/// A kubeconfig that points a client at this server, without TLS or credentials.
pub fn kubeconfig(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: replay\n  cluster:\n    server: {url}\ncontexts:\n- name: replay\n  context:\n    cluster: replay\n    user: replay\n    namespace: default\ncurrent-context: replay\nusers:\n- name: replay\n  user: {{}}\n"
    )
}
