//! What the filter's unit tests build on the fake Envoy: the plugin configurations of
//! each role (from the example configs that `make demo` runs), snapshots, summaries,
//! and a gateway of one singleton, one control worker and N router workers.

use infergate_core::config::{InfergateConfig, RoutingConfig, TenantSource};
use infergate_core::endpoint::Endpoint;
use infergate_core::filter_config::{ControlRole, FilterConfig, GlobalRole, RouterRole};
use infergate_core::global::{ClusterSummary, GlobalRouterConfig, ModelSummary, SUMMARY_VERSION};
use infergate_core::snapshot::{PodSignals, PodState, PoolState, SNAPSHOT_VERSION, Snapshot};
use infergate_core::wire::path;
use serde_json::json;

use crate::host::fake::{FakeEnvoy, Stream, Worker};

pub const VM_ID: &str = "infergate";
pub const TOKEN_ENV: &str = "INFERGATE_TEST_TOKEN";
pub const TOKEN: &str = "s3cret";
/// The example's three-pod pool and a model it serves.
pub const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";
pub const POOL: &str = "llama";
pub const PODS: [&str; 3] = ["127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"];

pub fn routing() -> RoutingConfig {
    let text = include_str!("../../examples/infergate.yaml");
    match InfergateConfig::from_yaml_str(text, "examples/infergate.yaml") {
        Ok(config) => config.routing_config(),
        Err(err) => panic!("the example config does not load: {err}"),
    }
}

fn encode(config: &FilterConfig) -> Vec<u8> {
    serde_json::to_vec(config).unwrap_or_default()
}

pub fn router_config(explain: bool) -> Vec<u8> {
    router_config_with(routing(), explain, true)
}

/// The router's config for `routing`, routing before the body ends or not.
pub fn router_config_with(routing: RoutingConfig, explain: bool, early_decision: bool) -> Vec<u8> {
    router_config_full(routing, explain, early_decision, None)
}

/// The router's config, with where it reads each request's tenant.
pub fn router_config_full(
    routing: RoutingConfig,
    explain: bool,
    early_decision: bool,
    tenant: Option<TenantSource>,
) -> Vec<u8> {
    encode(&FilterConfig::Router(Box::new(router_role(routing, explain, early_decision, tenant))))
}

/// The router's role, for a test to change before encoding it with [`role_config`].
pub fn router_role(
    routing: RoutingConfig,
    explain: bool,
    early_decision: bool,
    tenant: Option<TenantSource>,
) -> RouterRole {
    RouterRole {
        vm_id: VM_ID.to_string(),
        routing,
        max_body_bytes: 64 * 1024,
        early_decision,
        explain,
        tenant,
        pool_clusters: Default::default(),
    }
}

/// `role` as the router's plugin configuration.
pub fn role_config(role: RouterRole) -> Vec<u8> {
    encode(&FilterConfig::Router(Box::new(role)))
}

pub fn control_config() -> Vec<u8> {
    encode(&FilterConfig::Control(ControlRole { vm_id: VM_ID.to_string(), token_env: TOKEN_ENV.to_string() }))
}

pub fn singleton_config() -> Vec<u8> {
    encode(&FilterConfig::Singleton)
}

pub fn global_router_config() -> GlobalRouterConfig {
    let text = include_str!("../../examples/infergate-global.yaml");
    match GlobalRouterConfig::from_yaml_str(text, "examples/infergate-global.yaml") {
        Ok(config) => config,
        Err(err) => panic!("the example global config does not load: {err}"),
    }
}

pub fn global_config(config: GlobalRouterConfig) -> Vec<u8> {
    encode(&FilterConfig::Global(Box::new(GlobalRole { config, token_env: TOKEN_ENV.to_string(), explain: true })))
}

pub fn pod(address: &str) -> Endpoint {
    address.parse().unwrap_or_else(|_| panic!("bad test address {address}"))
}

/// A snapshot of the example's `llama` pool where each pod reports `signals`.
pub fn snapshot(sequence: u64, created_at_ms: u64, signals: &[PodSignals]) -> Vec<u8> {
    snapshot_with(sequence, created_at_ms, signals, routing())
}

/// The same, carrying `routing` (a config change reaches the workers this way).
pub fn snapshot_with(sequence: u64, created_at_ms: u64, signals: &[PodSignals], routing: RoutingConfig) -> Vec<u8> {
    let pods = PODS.iter().zip(signals).map(|(a, s)| PodState::scraped(pod(a), created_at_ms, s.clone())).collect();
    let snapshot = Snapshot {
        version: SNAPSHOT_VERSION,
        sequence,
        created_at_ms,
        routing,
        pools: vec![PoolState { name: POOL.to_string(), pods }],
        peers: Default::default(),
    };
    snapshot.encode().unwrap_or_default()
}

pub fn idle() -> PodSignals {
    PodSignals::default()
}

/// A summary of `cluster` serving `MODEL` with this predicted TTFT.
pub fn summary(cluster: &str, sequence: u64, created_at_ms: u64, predicted_ttft_ms: f64) -> Vec<u8> {
    let summary = ClusterSummary {
        version: SUMMARY_VERSION,
        cluster: cluster.to_string(),
        sequence,
        created_at_ms,
        interval_ms: 1_000,
        gateway_healthy: true,
        models: vec![ModelSummary {
            model: MODEL.to_string(),
            ready_pods: 2,
            waiting: 0.0,
            running: 0.0,
            kv_cache_usage: 0.1,
            predicted_ttft_ms,
            prefill_ms: 18.0,
        }],
    };
    summary.encode().unwrap_or_default()
}

pub fn chat(prompt: &str) -> serde_json::Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": prompt}], "stream": true})
}

/// A POST of a snapshot or summary to a control worker, with the bearer token.
pub fn push(control: &Worker, path: &str, body: &[u8]) -> Stream {
    let mut stream = control.stream();
    let bearer = format!("Bearer {TOKEN}");
    stream.request("POST", path, &[("authorization", &bearer)], &[body]);
    stream
}

/// One Envoy as the renderer configures it: the singleton, a control worker and
/// `routers` router workers, all under one `vm_id`.
pub struct Gateway {
    pub envoy: FakeEnvoy,
    pub singleton: Worker,
    pub control: Worker,
    pub routers: Vec<Worker>,
}

impl Gateway {
    pub fn new(routers: usize, explain: bool) -> Self {
        Self::with_router_config(routers, &router_config(explain))
    }

    /// A gateway whose routers run `router`, a router role's plugin configuration.
    pub fn with_router_config(routers: usize, router: &[u8]) -> Self {
        let envoy = FakeEnvoy::new();
        envoy.set_env(TOKEN_ENV, TOKEN);
        let singleton = envoy.start(VM_ID, &singleton_config());
        let control = envoy.start(VM_ID, &control_config());
        let routers = (0..routers).map(|_| envoy.start(VM_ID, router)).collect();
        Self { envoy, singleton, control, routers }
    }

    /// Pushes a snapshot through the control listener and lets the singleton publish
    /// it; returns the control listener's status.
    pub fn push_snapshot(&self, bytes: &[u8]) -> u32 {
        let stream = push(&self.control, path::SNAPSHOT, bytes);
        self.envoy.deliver();
        stream.reply().map_or(0, |r| r.status)
    }

    /// Routes a streamed chat request on router `worker`; returns the stream and the
    /// chosen pod.
    pub fn route(&self, worker: usize, prompt: &str) -> (Stream, Option<String>) {
        self.route_model(worker, MODEL, prompt)
    }

    /// The same for `model`.
    pub fn route_model(&self, worker: usize, model: &str, prompt: &str) -> (Stream, Option<String>) {
        let mut stream = self.routers[worker].stream();
        let mut body = chat(prompt);
        body["model"] = json!(model);
        stream.post_json("/v1/chat/completions", &[], &body);
        let chosen = stream.request_header(infergate_core::wire::header::ENDPOINT).map(first_endpoint);
        (stream, chosen)
    }
}

/// The first pod of an `x-gateway-destination-endpoint` list.
pub fn first_endpoint(list: &str) -> String {
    list.split(',').next().unwrap_or_default().to_string()
}
