//! Where the agent learns its config and pods. A watched infergate.yaml; and
//! Kubernetes discovery against a replayed API server (no cluster runs here): pods
//! added, turned not ready, terminating and deleted; BOOKMARK events; a 410 Gone that
//! forces a new list; InferencePool selectors; an InferenceGatewayConfig change
//! that reaches the filter in real Envoy without a reload; and the gateway replicas
//! found through the control Service's EndpointSlices.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use infergate_core::config::InfergateConfig;
use infergate_e2e::kube_api::{FakeApiServer, SliceEndpoint, endpoint_slice, event, gone, list, pod, pod_bookmark};
use infergate_metrics_agent::discovery::PoolEndpoints;
use infergate_metrics_agent::discovery::kubernetes::follow_pools;
use serde_json::json;
use tokio::sync::{mpsc, watch};

const PODS: &str = "/api/v1/namespaces/default/pods";
const POOLS: &str = "/apis/inference.networking.k8s.io/v1/namespaces/default/inferencepools";

fn client(url: &str) -> kube::Client {
    let config = kube::Config::new(url.parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

fn config(yaml: &str) -> Arc<InfergateConfig> {
    Arc::new(InfergateConfig::from_yaml_str(yaml, "test.yaml").unwrap())
}

/// Waits for the pool's next reported pod set, and returns it with how long it took.
async fn next(updates: &mut mpsc::UnboundedReceiver<PoolEndpoints>) -> (BTreeSet<String>, Duration) {
    let started = Instant::now();
    let update = tokio::time::timeout(Duration::from_secs(10), updates.recv())
        .await
        .expect("an update within 10 s")
        .expect("the follower is running");
    (update.endpoints.keys().map(|e| e.to_string()).collect(), started.elapsed())
}

/// The pools' discovery for a config, against the API server at `url`; it runs while
/// the returned config sender lives.
struct Following {
    task: tokio::task::JoinHandle<()>,
    _config: watch::Sender<Arc<InfergateConfig>>,
}

impl Drop for Following {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn follow(url: &str, yaml: &str) -> (Following, mpsc::UnboundedReceiver<PoolEndpoints>) {
    let (config_sender, configs) = watch::channel(config(yaml));
    let (sender, updates) = mpsc::unbounded_channel();
    (Following { task: tokio::spawn(follow_pools(client(url), configs, sender)), _config: config_sender }, updates)
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_followed_through_add_not_ready_delete_and_a_410_relist() {
    let api = FakeApiServer::default();
    let labels = json!({"app": "vllm-llama", "pod-template-hash": "7d9f8b6c5"});
    api.queue_list(
        PODS,
        list(
            "PodList",
            "v1",
            "100",
            vec![
                pod("vllm-llama-a", labels.clone(), "10.244.0.11", true, false, "97"),
                pod("vllm-llama-b", labels.clone(), "10.244.0.12", false, false, "98"),
                pod("vllm-llama-old", labels.clone(), "10.244.0.13", true, true, "99"),
            ],
        ),
    );
    // What the list after the 410 returns: the pods as they are by then.
    api.queue_list(
        PODS,
        list("PodList", "v1", "300", vec![pod("vllm-llama-d", labels.clone(), "10.244.0.14", true, false, "290")]),
    );
    let running = api.clone().start().await;
    let yaml = r#"
version: 1
pools:
  - name: llama
    discovery: {pods: {namespace: default, match_labels: {app: vllm-llama}, target_ports: [8000, 8001]}}
models: [{name: llama, pool: llama}]
"#;
    let (_following, mut updates) = follow(&running.url, yaml);

    // The list: only the Ready, non-terminating pod, on both data-parallel ports.
    let (pods, _) = next(&mut updates).await;
    assert_eq!(pods, set(&["10.244.0.11:8000", "10.244.0.11:8001"]));
    api.wait_for_watch(PODS, 1).await;
    let first_watch = api.requests().into_iter().find(|r| r.contains("watch=true")).unwrap();
    assert!(first_watch.contains("resourceVersion=100"), "{first_watch}");
    assert!(first_watch.contains("allowWatchBookmarks=true"), "{first_watch}");
    assert!(first_watch.contains("labelSelector=app%3Dvllm-llama"), "{first_watch}");

    // ADDED, Ready: in well under a second.
    assert!(
        api.send_event(PODS, event("ADDED", pod("vllm-llama-c", labels.clone(), "10.244.0.15", true, false, "110")))
    );
    let (pods, took) = next(&mut updates).await;
    assert_eq!(pods.len(), 4, "{pods:?}");
    assert!(pods.contains("10.244.0.15:8000"));
    assert!(took < Duration::from_secs(1), "a new pod took {took:?}");

    // A BOOKMARK changes nothing; the next real event is still reported.
    assert!(api.send_event(PODS, pod_bookmark("120")));
    // MODIFIED to not Ready: it leaves.
    assert!(
        api.send_event(
            PODS,
            event("MODIFIED", pod("vllm-llama-a", labels.clone(), "10.244.0.11", false, false, "130"))
        )
    );
    let (pods, _) = next(&mut updates).await;
    assert_eq!(pods, set(&["10.244.0.15:8000", "10.244.0.15:8001"]));

    // The not-ready pod b turns Ready.
    assert!(
        api.send_event(PODS, event("MODIFIED", pod("vllm-llama-b", labels.clone(), "10.244.0.12", true, false, "140")))
    );
    let (pods, _) = next(&mut updates).await;
    assert_eq!(pods.len(), 4);

    // Terminating (deletionTimestamp set), then DELETED.
    assert!(
        api.send_event(PODS, event("MODIFIED", pod("vllm-llama-b", labels.clone(), "10.244.0.12", true, true, "150")))
    );
    let (pods, _) = next(&mut updates).await;
    assert_eq!(pods, set(&["10.244.0.15:8000", "10.244.0.15:8001"]));
    assert!(
        api.send_event(PODS, event("DELETED", pod("vllm-llama-c", labels.clone(), "10.244.0.15", true, true, "160")))
    );
    let (pods, _) = next(&mut updates).await;
    assert!(pods.is_empty(), "{pods:?}");

    // 410 Gone: the watcher lists again, and the listed state replaces the old one.
    assert!(api.send_event(PODS, gone("160")));
    api.close_watch(PODS);
    let (pods, _) = next(&mut updates).await;
    assert_eq!(pods, set(&["10.244.0.14:8000", "10.244.0.14:8001"]));
    let lists = api.requests().iter().filter(|r| r.starts_with(PODS) && !r.contains("watch=true")).count();
    assert_eq!(lists, 2, "{:#?}", api.requests());
    api.wait_for_watch(PODS, 2).await;
    let last_watch = api.requests().into_iter().rfind(|r| r.contains("watch=true")).unwrap();
    assert!(last_watch.contains("resourceVersion=300"), "{last_watch}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inference_pool_defines_the_pods_and_editing_it_moves_the_pool() {
    let api = FakeApiServer::default();
    let inference_pool = |app: &str, port: u16, rv: &str| {
        json!({
            "apiVersion": "inference.networking.k8s.io/v1",
            "kind": "InferencePool",
            "metadata": {"name": "llama", "namespace": "default", "resourceVersion": rv, "generation": 1,
                         "uid": "5a0c7c1e-2222-4333-8444-555566667777", "creationTimestamp": "2026-11-29T09:00:00Z"},
            "spec": {
                "selector": {"matchLabels": {"app": app}},
                "targetPorts": [{"number": port}],
                "endpointPickerRef": {"group": "", "kind": "Service", "name": "infergate", "port": {"number": 9002}, "failureMode": "FailClose"}
            }
        })
    };
    api.queue_list(
        POOLS,
        list(
            "InferencePoolList",
            "inference.networking.k8s.io/v1",
            "10",
            vec![inference_pool("vllm-llama", 8000, "9")],
        ),
    );
    api.queue_list(
        PODS,
        list(
            "PodList",
            "v1",
            "20",
            vec![
                pod("vllm-llama-a", json!({"app": "vllm-llama"}), "10.244.1.1", true, false, "18"),
                pod("sglang-llama-a", json!({"app": "sglang-llama"}), "10.244.1.2", true, false, "19"),
            ],
        ),
    );
    let running = api.clone().start().await;
    let yaml = r#"
version: 1
pools:
  - name: llama
    discovery: {inference_pool: {name: llama}}
models: [{name: llama, pool: llama}]
"#;
    let (_following, mut updates) = follow(&running.url, yaml);
    // The replayed server does not filter: the selector must be in the request.
    let (pods, _) = next(&mut updates).await;
    assert!(pods.contains("10.244.1.1:8000"), "{pods:?}");
    let pod_list = api.requests().into_iter().find(|r| r.starts_with(PODS)).unwrap();
    assert!(pod_list.contains("labelSelector=app%3Dvllm-llama"), "{pod_list}");
    let pool_list = api.requests().into_iter().find(|r| r.starts_with(POOLS)).unwrap();
    assert!(pool_list.contains("fieldSelector=metadata.name%3Dllama"), "{pool_list}");

    // The pool is edited to select SGLang pods on another port: a new pod watch.
    api.queue_list(
        PODS,
        list(
            "PodList",
            "v1",
            "40",
            vec![pod("sglang-llama-a", json!({"app": "sglang-llama"}), "10.244.1.2", true, false, "19")],
        ),
    );
    api.wait_for_watch(POOLS, 1).await;
    assert!(api.send_event(POOLS, event("MODIFIED", inference_pool("sglang-llama", 30000, "30"))));
    let (pods, took) = next(&mut updates).await;
    assert_eq!(pods, set(&["10.244.1.2:30000"]));
    assert!(took < Duration::from_secs(1), "moving the pool took {took:?}");
    let last_list = api.requests().into_iter().rfind(|r| r.starts_with(PODS) && !r.contains("watch")).unwrap();
    assert!(last_list.contains("labelSelector=app%3Dsglang-llama"), "{last_list}");

    // Deleted: the pool has no discovered pods.
    assert!(api.send_event(POOLS, event("DELETED", inference_pool("sglang-llama", 30000, "31"))));
    let (pods, _) = next(&mut updates).await;
    assert!(pods.is_empty());
}

const CONFIGS: &str = "/apis/infergate.io/v1alpha1/namespaces/default/inferencegatewayconfigs";

fn gateway_config(config: &InfergateConfig, resource_version: &str) -> serde_json::Value {
    json!({
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "gw", "namespace": "default", "resourceVersion": resource_version, "generation": 1,
                     "uid": "1d2e3f40-3333-4444-8555-666677778888", "creationTimestamp": "2026-11-29T09:00:00Z"},
        "spec": serde_json::to_value(config).unwrap(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inference_gateway_config_change_reaches_envoy_without_a_reload() {
    let mut stack =
        infergate_e2e::Stack::start(infergate_e2e::StackSpec { start_agent: false, ..Default::default() }).await;
    let api = FakeApiServer::default();
    api.queue_list(
        CONFIGS,
        list("InferenceGatewayConfigList", "infergate.io/v1alpha1", "50", vec![gateway_config(&stack.config, "49")]),
    );
    let running = api.clone().start().await;
    let kubeconfig = stack.path("kubeconfig");
    std::fs::write(&kubeconfig, infergate_e2e::kube_api::kubeconfig(&running.url)).unwrap();
    let kubeconfig = kubeconfig.to_string_lossy().to_string();
    stack
        .start_agent_with(
            &[std::ffi::OsStr::new("--config-resource"), std::ffi::OsStr::new("default/gw")],
            &[("KUBECONFIG", kubeconfig.as_str())],
        )
        .await;
    assert_eq!(stack.chat("m", 4).await.status, 200);
    let reply = stack.chat("m2", 4).await;
    assert_eq!((reply.status, reply.error_code().as_str()), (404, "model_not_found"));

    // The resource gains a model: it is served without touching Envoy.
    let mut changed = stack.config.clone();
    changed.models.push(infergate_core::config::ModelConfig {
        name: "m2".into(),
        pool: "a".into(),
        adapter: None,
        criticality: Default::default(),
    });
    api.wait_for_watch(CONFIGS, 1).await;
    assert!(api.send_event(CONFIGS, event("MODIFIED", gateway_config(&changed, "60"))));
    let started = Instant::now();
    stack
        .wait_until("model m2 to be routed", Duration::from_secs(5), || async {
            stack.chat("m2", 4).await.status == 200
        })
        .await;
    eprintln!("the config change reached the filter in {:?}", started.elapsed());

    // An invalid edit is refused by the agent, which keeps the running config.
    let mut invalid = changed.clone();
    invalid.models.push(infergate_core::config::ModelConfig {
        name: "m3".into(),
        pool: "nope".into(),
        adapter: None,
        criticality: Default::default(),
    });
    assert!(api.send_event(CONFIGS, event("MODIFIED", gateway_config(&invalid, "70"))));
    stack
        .wait_until("the agent to refuse the invalid config", Duration::from_secs(5), || async {
            stack.agent_log().contains("the InferenceGatewayConfig is invalid")
        })
        .await;
    assert!(stack.agent_log().contains("models[2].pool"), "{}", stack.agent_log());
    assert_eq!(stack.chat("m2", 4).await.status, 200);
    assert_eq!(stack.chat("m3", 4).await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_config_file_reaches_envoy_without_a_reload_and_a_broken_edit_is_refused() {
    let stack = infergate_e2e::Stack::start(infergate_e2e::StackSpec::default()).await;
    let file = stack.path("infergate.yaml");
    let mut changed = stack.config.clone();
    changed.models.push(infergate_core::config::ModelConfig {
        name: "m2".into(),
        pool: "a".into(),
        adapter: None,
        criticality: Default::default(),
    });
    assert_eq!(stack.chat("m2", 4).await.status, 404);
    std::fs::write(&file, serde_yaml_ng::to_string(&changed).unwrap()).unwrap();
    let started = Instant::now();
    stack
        .wait_until("model m2 to be routed", Duration::from_secs(5), || async {
            stack.chat("m2", 4).await.status == 200
        })
        .await;
    eprintln!("the edited file reached the filter in {:?}", started.elapsed());

    let broken = serde_yaml_ng::to_string(&changed).unwrap().replace("scrape_timeout_ms", "scrape_timeout_msec");
    std::fs::write(&file, broken).unwrap();
    stack
        .wait_until("the agent to refuse the broken file", Duration::from_secs(5), || async {
            stack.agent_log().contains("the changed config is invalid")
        })
        .await;
    let log = stack.agent_log();
    let line = log.lines().find(|l| l.contains("the changed config is invalid")).unwrap();
    assert!(line.contains("infergate.yaml:") && line.contains("scrape_timeout_msec"), "{line}");
    assert_eq!(stack.chat("m2", 4).await.status, 200);
}

const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/gw/endpointslices";

/// A second gateway replica: an HTTP server on another loopback address and the same
/// port as Envoy's control listener, which keeps what is pushed to it.
async fn replica(port: u16) -> (Arc<std::sync::Mutex<Vec<(String, Vec<u8>)>>>, tokio::task::JoinHandle<()>) {
    let pushes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = Arc::clone(&pushes);
    let app = axum::Router::new().route(
        "/v1/snapshot",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let kept = Arc::clone(&kept);
            async move {
                let token = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                kept.lock().unwrap().push((token, body.to_vec()));
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.2", port)).await.unwrap();
    (pushes, tokio::spawn(async move { axum::serve(listener, app).await.unwrap() }))
}

fn control_slice(port: u16, endpoints: &[SliceEndpoint], resource_version: &str) -> serde_json::Value {
    endpoint_slice("infergate-control", "gw", ("control", port), endpoints, resource_version)
}

const GATEWAY_1: &str = "envoy-gw-5d8c7b9f4-abcde";
const GATEWAY_2: &str = "envoy-gw-5d8c7b9f4-fghij";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ready_endpoint_of_the_control_service_gets_every_push() {
    let mut stack =
        infergate_e2e::Stack::start(infergate_e2e::StackSpec { start_agent: false, ..Default::default() }).await;
    let port = stack.config.gateway.control.port();
    let (pushes, _replica) = replica(port).await;
    let api = FakeApiServer::default();
    let first = SliceEndpoint { ip: "127.0.0.1", pod: GATEWAY_1, ready: true, terminating: false };
    let starting = SliceEndpoint { ip: "127.0.0.2", pod: GATEWAY_2, ready: false, terminating: false };
    api.queue_list(
        SLICES,
        list("EndpointSliceList", "discovery.k8s.io/v1", "80", vec![control_slice(port, &[first, starting], "79")]),
    );
    let running = api.clone().start().await;
    let kubeconfig = stack.path("kubeconfig");
    std::fs::write(&kubeconfig, infergate_e2e::kube_api::kubeconfig(&running.url)).unwrap();
    let kubeconfig = kubeconfig.to_string_lossy().to_string();
    let config = stack.path("infergate.yaml");
    // Returns once Envoy, the one ready endpoint, has accepted a push.
    stack
        .start_agent_with(
            &[
                std::ffi::OsStr::new("-c"),
                config.as_os_str(),
                std::ffi::OsStr::new("--control-service"),
                std::ffi::OsStr::new("gw/infergate-control"),
            ],
            &[("KUBECONFIG", kubeconfig.as_str())],
        )
        .await;
    assert!(
        api.requests().iter().any(|r| r.contains("labelSelector=kubernetes.io%2Fservice-name%3Dinfergate-control")),
        "{:?}",
        api.requests()
    );
    assert!(pushes.lock().unwrap().is_empty(), "a replica that is not ready got a push");
    let agent_metrics = || async {
        let url = format!("{}/metrics", stack.agent_url);
        stack.client().get(url).send().await.unwrap().text().await.unwrap()
    };
    assert!(agent_metrics().await.contains("infergate_agent_gateways 1\n"), "{}", agent_metrics().await);

    // The second replica turns ready: it gets a push at once, signed with the token.
    api.wait_for_watch(SLICES, 1).await;
    let both = [first, SliceEndpoint { ready: true, ..starting }];
    assert!(api.send_event(SLICES, event("MODIFIED", control_slice(port, &both, "81"))));
    let started = Instant::now();
    stack
        .wait_until("the new replica's first push", Duration::from_secs(5), || async {
            !pushes.lock().unwrap().is_empty()
        })
        .await;
    eprintln!("the new replica got its first push {:?} after it turned ready", started.elapsed());
    let (token, body) = pushes.lock().unwrap()[0].clone();
    assert_eq!(token, format!("Bearer {}", infergate_e2e::stack::TOKEN));
    let snapshot = infergate_core::snapshot::Snapshot::decode(&body).unwrap();
    assert_eq!(snapshot.pools.iter().map(|p| p.pods.len()).sum::<usize>(), stack.fleet.pods.len());
    assert!(agent_metrics().await.contains("infergate_agent_gateways 2\n"));

    // The first replica is terminating: no more pushes reach it, and its series go.
    let accepted = || async { stack.stat("infergate.control.accepted").await.unwrap_or(0) };
    let leaving =
        [SliceEndpoint { ready: false, terminating: true, ..first }, SliceEndpoint { ready: true, ..starting }];
    assert!(api.send_event(SLICES, event("MODIFIED", control_slice(port, &leaving, "82"))));
    stack
        .wait_until("the agent to drop the terminating replica", Duration::from_secs(5), || async {
            agent_metrics().await.contains("infergate_agent_gateways 1\n")
        })
        .await;
    let before = accepted().await;
    let replica_before = pushes.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(accepted().await, before, "the terminating replica still gets pushes");
    assert!(pushes.lock().unwrap().len() >= replica_before + 3, "the remaining replica stopped getting pushes");
    let metrics = agent_metrics().await;
    assert!(!metrics.contains(&format!("127.0.0.1:{port}")), "{metrics}");

    // No replica left: the agent is not ready, and says so.
    assert!(api.send_event(SLICES, event("DELETED", control_slice(port, &leaving, "83"))));
    stack
        .wait_until("the agent to report no gateway", Duration::from_secs(5), || async {
            let readyz = stack.client().get(format!("{}/readyz", stack.agent_url)).send().await.unwrap();
            readyz.status() == 503 && agent_metrics().await.contains("infergate_agent_gateways 0\n")
        })
        .await;
}
