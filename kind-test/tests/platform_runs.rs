//! What Envoy Gateway and Istio would run, with our patches, brought up in real Envoy:
//! the router from the platform's API, the control listener and the singleton from our
//! patches, every module fetched over HTTP and checked by SHA-256. The agent's pushes
//! must reach the router's VM, and routing must follow the pods' signals.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use infergate_core::config::{DisaggMode, Disaggregation, Discovery, InfergateConfig, PodSelector, SplitPolicy};
use infergate_core::wire::header::IDENTITY;
use infergate_core::wire::stat;
use infergate_e2e::stack::PodShaper;
use infergate_e2e::{BootstrapWriter, ModelSpec, Stack, StackSpec, artifacts, jwt};
use infergate_envoy_config::kubernetes::{GatewayRef, KubernetesOptions, WasmSource, envoy_gateway, istio};
use infergate_kind_test::platforms::{self, Placement};
use infergate_model_sim::server::{KvRole, PdSettings, PodSpec};
use serde_json::Value;
use sha2::{Digest, Sha256};

#[derive(Clone, Copy)]
enum Platform {
    EnvoyGateway,
    Istio,
}

/// Serves the built module at every path, as a web server or Envoy Gateway's cache would.
async fn serve_module() -> SocketAddr {
    let module = std::fs::read(artifacts::filter_wasm()).expect("the built filter");
    let app = axum::Router::new().fallback(move || {
        let module = module.clone();
        async move { module }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the module server");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The stack's config, its pools given the pod selectors a cluster would have.
fn as_in_a_cluster(config: &InfergateConfig) -> InfergateConfig {
    let mut placed = config.clone();
    for pool in &mut placed.pools {
        let port = pool.endpoints.first().map_or(8000, |e| e.socket_addr().port());
        pool.discovery = Some(Discovery {
            pods: Some(PodSelector {
                namespace: "infergate-demo".into(),
                match_labels: BTreeMap::from([("app".to_string(), pool.name.clone())]),
                target_ports: vec![port],
            }),
            inference_pool: None,
        });
    }
    placed
}

fn bootstrap(platform: Platform, config: &InfergateConfig, module_server: SocketAddr, sha256: &str) -> String {
    let gateway = GatewayRef {
        namespace: "infergate-demo".into(),
        name: "infergate".into(),
        listener: "http".into(),
        pods_namespace: "envoy-gateway-system".into(),
        port: config.gateway.listen.port(),
    };
    let wasm = WasmSource {
        url: format!("http://{module_server}/infergate_filter.wasm"),
        sha256: sha256.to_string(),
        image: None,
    };
    let options = KubernetesOptions::new(gateway, wasm);
    let placement = Placement {
        gateway: config.gateway.listen,
        admin: config.gateway.admin,
        service_endpoints: config
            .pools
            .iter()
            .map(|pool| {
                let name = infergate_envoy_config::kubernetes::pool_service_name(&pool.name);
                (name, pool.endpoints.iter().map(|e| e.socket_addr()).collect())
            })
            .collect(),
        wasm_cache: module_server,
    };
    let placed = as_in_a_cluster(config);
    let bootstrap: Value = match platform {
        Platform::EnvoyGateway => {
            let documents = envoy_gateway::render(&placed, &options).expect("render for Envoy Gateway");
            platforms::envoy_gateway::bootstrap(&documents, &placement).expect("model Envoy Gateway")
        }
        Platform::Istio => {
            let documents = istio::render(&placed, &options).expect("render for Istio");
            platforms::istio::bootstrap(&documents, &placement).expect("model Istio")
        }
    };
    serde_json::to_string_pretty(&bootstrap).expect("bootstrap as JSON")
}

async fn routing_follows_signals(platform: Platform) {
    let module_server = serve_module().await;
    let sha256 = format!("{:x}", Sha256::digest(std::fs::read(artifacts::filter_wasm()).unwrap()));
    let writer = BootstrapWriter(Arc::new(move |config| bootstrap(platform, config, module_server, &sha256)));
    // Stack::start returns once the agent's first snapshot was accepted: through the
    // patched-in control listener, into the patched-in singleton.
    let stack = Stack::start(StackSpec { bootstrap: Some(writer), ..StackSpec::default() }).await;
    let pods = stack.fleet.pods.clone();
    for best in [pods[2], pods[0]] {
        stack.favour(best, &pods).await;
        // Five in a row: the pods are pinned one by one, and a scrape between two pins
        // can still show the previous favourite idle.
        stack
            .wait_until("routing to follow the pinned metrics", Duration::from_secs(5), || async {
                for _ in 0..5 {
                    if stack.chat("m", 1).await.served_by() != Some(&best.to_string()) {
                        return false;
                    }
                }
                true
            })
            .await;
        let mut to_best = 0;
        for _ in 0..20 {
            let reply = stack.chat("m", 1).await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            to_best += usize::from(reply.served_by() == Some(&best.to_string()));
        }
        assert!(to_best >= 19, "only {to_best}/20 requests went to the pod the signals favour");
    }
    let reply = stack.post("/v1/chat/completions", "{not json", &[("content-type", "application/json")]).await;
    assert_eq!(reply.status, 400, "the router answers bad input itself: {}", reply.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateway_with_our_patches_routes_by_the_pods_signals() {
    routing_follows_signals(Platform::EnvoyGateway).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_with_our_patches_routes_by_the_pods_signals() {
    routing_follows_signals(Platform::Istio).await;
}

/// A disaggregated pool in `mode: gateway`: the filter sends each prefill leg to the
/// pool's cluster, which the platform names (not `pool-<name>`); every leg is answered
/// and none falls back.
async fn prefill_legs_reach_the_platforms_cluster(platform: Platform) {
    let module_server = serve_module().await;
    let sha256 = format!("{:x}", Sha256::digest(std::fs::read(artifacts::filter_wasm()).unwrap()));
    let writer = BootstrapWriter(Arc::new(move |config| bootstrap(platform, config, module_server, &sha256)));
    // Pod 0 only prefills, pods 1 and 2 only decode; every request is split.
    let shaper = PodShaper(Arc::new(|index, spec: PodSpec| {
        let role = if index == 0 { KvRole::Producer } else { KvRole::Consumer };
        PodSpec { pd: PdSettings { role, ..PdSettings::default() }, ..spec }
    }));
    let disaggregation = Disaggregation { mode: DisaggMode::Gateway, split: SplitPolicy::Always, ..Default::default() };
    let stack = Stack::start(StackSpec {
        bootstrap: Some(writer),
        pools: vec![("a", 3)],
        models: vec![ModelSpec::base("m", "a")],
        disaggregation: Some((disaggregation, 1)),
        pod_shaper: Some(shaper),
        ..StackSpec::default()
    })
    .await;
    let prompt = "a question about the tides of the northern sea ".repeat(200);
    for i in 0..4 {
        let body = infergate_e2e::chat_body("m", &format!("{i} {prompt}"), 4).to_string();
        let reply = stack.post("/v1/chat/completions", body, &[]).await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.body);
    }
    assert_eq!(stack.stat(stat::PD_PREFILL_OK).await, Some(4), "every prefill leg answered");
    let dispatch = format!("{}dispatch", stat::PD_FALLBACK_PREFIX);
    assert_eq!(stack.stat(&dispatch).await.unwrap_or(0), 0, "a leg Envoy could not send");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateway_with_our_patches_sends_prefill_legs_to_its_named_cluster() {
    prefill_legs_reach_the_platforms_cluster(Platform::EnvoyGateway).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_with_our_patches_sends_prefill_legs_to_its_named_cluster() {
    prefill_legs_reach_the_platforms_cluster(Platform::Istio).await;
}

/// With a required `jwt` identity, the platform's gateway gets our identity filters
/// through its patch resource, ahead of the router: a verified token is served, and a
/// request with none, or with only a forged identity header, gets the router's 401.
async fn identity_is_verified_before_the_router(platform: Platform) {
    let module_server = serve_module().await;
    let sha256 = format!("{:x}", Sha256::digest(std::fs::read(artifacts::filter_wasm()).unwrap()));
    let writer = BootstrapWriter(Arc::new(move |config| bootstrap(platform, config, module_server, &sha256)));
    let dir = tempfile::tempdir().expect("a temp dir");
    let identity = jwt::required_identity(dir.path());
    let stack = Stack::start(StackSpec { bootstrap: Some(writer), identity, ..StackSpec::default() }).await;
    let body = infergate_e2e::chat_body("m", "Hello there", 1).to_string();
    let bearer = format!("Bearer {}", jwt::valid_token("acme"));
    let reply = stack.post("/v1/chat/completions", body.clone(), &[("authorization", &bearer)]).await;
    assert_eq!(reply.status, 200, "a verified token: {}", reply.body);
    for (what, headers) in [
        ("no token", vec![]),
        ("a forged identity header alone", vec![(IDENTITY, "acme")]),
        ("a malformed token", vec![("authorization", "Bearer e30.e30.e30")]),
    ] {
        let reply = stack.post("/v1/chat/completions", body.clone(), &headers).await;
        assert_eq!(reply.status, 401, "{what}: {}", reply.body);
        assert!(reply.body.contains("invalid_api_key"), "{what}: {}", reply.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateway_with_our_patches_verifies_the_token_before_the_router() {
    identity_is_verified_before_the_router(Platform::EnvoyGateway).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_with_our_patches_verifies_the_token_before_the_router() {
    identity_is_verified_before_the_router(Platform::Istio).await;
}

/// Each Envoy Gateway patch is there for a reason: without it, this is what breaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_stop_iteration_patch_envoy_gateway_hangs_every_request() {
    let module_server = serve_module().await;
    let sha256 = format!("{:x}", Sha256::digest(std::fs::read(artifacts::filter_wasm()).unwrap()));
    let writer = BootstrapWriter(Arc::new(move |config| {
        let mut bootstrap: Value =
            serde_json::from_str(&bootstrap(Platform::EnvoyGateway, config, module_server, &sha256)).unwrap();
        let filters = &mut bootstrap["static_resources"]["listeners"][0]["default_filter_chain"]["filters"][0]["typed_config"]
            ["http_filters"][0]["typed_config"]["config"];
        filters.as_object_mut().unwrap().remove("allow_on_headers_stop_iteration").expect("the patch was applied");
        bootstrap.to_string()
    }));
    let stack = Stack::start(StackSpec { bootstrap: Some(writer), ..StackSpec::default() }).await;
    let request = stack
        .client()
        .post(format!("{}/v1/chat/completions", stack.gateway_url))
        .json(&infergate_e2e::chat_body("m", "hello", 1));
    let outcome = tokio::time::timeout(Duration::from_secs(3), request.send()).await;
    assert!(outcome.is_err(), "without the flag the request should hang, but got {outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_vm_id_patch_envoy_gateway_never_sees_the_agents_snapshots() {
    let module_server = serve_module().await;
    let sha256 = format!("{:x}", Sha256::digest(std::fs::read(artifacts::filter_wasm()).unwrap()));
    let writer = BootstrapWriter(Arc::new(move |config| {
        let mut bootstrap: Value =
            serde_json::from_str(&bootstrap(Platform::EnvoyGateway, config, module_server, &sha256)).unwrap();
        let vm = &mut bootstrap["static_resources"]["listeners"][0]["default_filter_chain"]["filters"][0]["typed_config"]
            ["http_filters"][0]["typed_config"]["config"]["vm_config"]["vm_id"];
        assert_eq!(*vm, "infergate", "the patch was applied");
        *vm = Value::from("envoyextensionpolicy/infergate-demo/infergate/wasm/0");
        bootstrap.to_string()
    }));
    // The agent's pushes are accepted (control and singleton share a VM)...
    let stack = Stack::start(StackSpec { bootstrap: Some(writer), ..StackSpec::default() }).await;
    let pods = stack.fleet.pods.clone();
    stack.favour(pods[2], &pods).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // ...but the router, in a VM of its own, never sees them: it spreads requests blind.
    let mut to_best = 0;
    for _ in 0..20 {
        let reply = stack.chat("m", 1).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        to_best += usize::from(reply.served_by() == Some(&pods[2].to_string()));
    }
    assert!(to_best < 15, "{to_best}/20 went to the favoured pod without the shared VM");
}
