//! Tier 2 on loopback: a global Envoy running the filter in its `global` role in front
//! of several tier-1 stacks, each of whose agents sends it summaries.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use infergate_core::config::{GatewaySettings, IdentitySettings};
use infergate_core::global::{
    ClassTargets, ClusterConfig, GlobalRouterConfig, GlobalSettings, RateLimits, RequestClass,
};
use infergate_envoy_config::render_global_bootstrap_yaml;

use crate::artifacts;
use crate::client::{Reply, chat_body, read_reply};
use crate::stack::{Stack, TOKEN, free_port, loopback, spawn_envoy};

/// The round trip the global router adds for the other region (loopback has none).
const CROSS_REGION_RTT_MS: f64 = 60.0;

/// A cluster behind the global router: its name, region and cost per million tokens.
pub struct ClusterSpec {
    pub name: &'static str,
    pub region: &'static str,
    pub cost_per_million_tokens: f64,
}

pub struct GlobalRouter {
    pub config: GlobalRouterConfig,
    pub url: String,
    pub control_url: String,
    pub admin_url: String,
    client: reqwest::Client,
    envoy: Child,
    dir: tempfile::TempDir,
}

impl GlobalRouter {
    /// Starts the global Envoy in front of `gateways` (each cluster's tier-1 listener).
    pub async fn start(local_region: &str, clusters: &[(ClusterSpec, SocketAddr)], summary_max_age_ms: u64) -> Self {
        Self::start_with(local_region, clusters, summary_max_age_ms, None, IdentitySettings::default()).await
    }

    /// The same, with global rate limits served by `rate_limits.service`, and tenants
    /// named by `identity`.
    pub async fn start_with(
        local_region: &str,
        clusters: &[(ClusterSpec, SocketAddr)],
        summary_max_age_ms: u64,
        rate_limits: Option<RateLimits>,
        identity: IdentitySettings,
    ) -> Self {
        let config = GlobalRouterConfig {
            version: 1,
            gateway: GatewaySettings {
                listen: loopback(free_port()),
                control: loopback(free_port()),
                admin: loopback(free_port()),
                max_body_bytes: 256 * 1024,
                request_timeout_ms: 30_000,
                retries: 2,
                ..GatewaySettings::default()
            },
            global: GlobalSettings {
                local_region: local_region.into(),
                summary_max_age_ms,
                default_class: RequestClass::Latency,
                targets: ClassTargets { latency_ttft_ms: 500.0, batch_ttft_ms: 30_000.0 },
                cross_region_rtt_ms: CROSS_REGION_RTT_MS,
            },
            clusters: clusters
                .iter()
                .map(|(spec, gateway)| ClusterConfig {
                    name: spec.name.into(),
                    region: spec.region.into(),
                    gateway: infergate_core::Endpoint::new(*gateway),
                    cost_per_million_tokens: spec.cost_per_million_tokens,
                })
                .collect(),
            rate_limits,
            identity,
        };
        config.validate().expect("the test's global config is valid");
        let dir = tempfile::tempdir().expect("a temp dir");
        let options = artifacts::render_options();
        let path = dir.path().join("global.yaml");
        std::fs::write(&path, render_global_bootstrap_yaml(&config, &options).expect("render")).expect("write");
        let log = std::fs::File::create(dir.path().join("envoy.log")).expect("a log file");
        let envoy = spawn_envoy(&path, 2, Stdio::from(log));
        let router = Self {
            url: format!("http://{}", config.gateway.listen),
            control_url: format!("http://{}", config.gateway.control),
            admin_url: format!("http://{}", config.gateway.admin),
            config,
            client: reqwest::Client::new(),
            envoy,
            dir,
        };
        let ready = format!("{}/ready", router.admin_url);
        for _ in 0..300 {
            if router.client.get(&ready).send().await.is_ok_and(|r| r.status().is_success()) {
                return router;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the global Envoy did not become ready");
    }

    /// Starts `stack`'s agent so that it also sends summaries here as `cluster`.
    pub async fn attach(&self, stack: &mut Stack, cluster: &str) {
        self.attach_to_all(stack, cluster, &[]).await;
    }

    /// The same, also to another replica of the global router.
    pub async fn attach_with_more(&self, stack: &mut Stack, cluster: &str, other: &GlobalRouter) {
        self.attach_to_all(stack, cluster, &[other]).await;
    }

    async fn attach_to_all(&self, stack: &mut Stack, cluster: &str, others: &[&GlobalRouter]) {
        let config = stack.path("infergate.yaml");
        let mut args: Vec<std::ffi::OsString> = vec![
            "-c".into(),
            config.into_os_string(),
            "--cluster".into(),
            cluster.into(),
            "--summary-to".into(),
            self.control_url.clone().into(),
        ];
        for other in others {
            args.push("--summary-to".into());
            args.push(other.control_url.clone().into());
        }
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        stack.start_agent_with(&refs, &[]).await;
    }

    pub async fn chat(&self, model: &str, class: Option<&str>) -> Reply {
        let mut headers = Vec::new();
        if let Some(class) = class {
            headers.push(("x-infergate-class", class));
        }
        self.post(&chat_body(model, "hello", 1), &headers).await
    }

    /// Posts a chat request body with these headers.
    pub async fn post(&self, body: &serde_json::Value, headers: &[(&str, &str)]) -> Reply {
        let mut request = self.client.post(format!("{}/v1/chat/completions", self.url)).json(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        match request.send().await {
            Ok(response) => read_reply(response).await,
            Err(err) => Reply { status: 0, headers: Default::default(), body: err.to_string() },
        }
    }

    /// The cluster the global router ranked first, from its decision header.
    pub fn first_cluster(reply: &Reply) -> Option<String> {
        let ranked = reply.header("x-infergate-decision")?.split("ranked=").nth(1)?.to_string();
        Some(ranked.split(['(', '>']).next()?.to_string())
    }
}

/// A process this harness started, killed when dropped.
pub struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Redis on a port of its own, without persistence.
pub async fn start_redis() -> (Process, u16) {
    let port = free_port();
    let redis = Process(
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed by `make setup` (apt-get install redis-server)"),
    );
    for _ in 0..100 {
        if std::net::TcpStream::connect(loopback(port)).is_ok() {
            return (redis, port);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("redis-server did not start on port {port}");
}

/// Rate limits for a test: the service and usage ports are free ones.
pub fn rate_limits(redis_port: u16, requests_per_minute: u64, tokens_per_minute: u64) -> RateLimits {
    RateLimits {
        service: infergate_core::Endpoint::new(loopback(free_port())),
        usage: infergate_core::Endpoint::new(loopback(free_port())),
        redis: format!("redis://127.0.0.1:{redis_port}"),
        tenant_header: "authorization".into(),
        default: infergate_core::global::Limits { requests_per_minute, tokens_per_minute },
        models: Vec::new(),
        failure_mode_deny: false,
    }
}

impl GlobalRouter {
    /// Starts `infergate-ratelimit` for this router's `rate_limits`.
    pub async fn start_rate_limit_service(&self) -> Process {
        let limits = self.config.rate_limits.as_ref().expect("this router has rate limits");
        let path = self.dir.path().join("infergate-global.yaml");
        std::fs::write(&path, serde_yaml_ng::to_string(&self.config).expect("config to YAML")).expect("write");
        let service = Process(
            Command::new(artifacts::binary("infergate-ratelimit"))
                .arg("-c")
                .arg(&path)
                .args(["--token-env", "INFERGATE_CONTROL_TOKEN"])
                .env("INFERGATE_CONTROL_TOKEN", TOKEN)
                .stdout(Stdio::null())
                .spawn()
                .expect("start infergate-ratelimit"),
        );
        for _ in 0..100 {
            if std::net::TcpStream::connect(limits.service.socket_addr()).is_ok() {
                return service;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("infergate-ratelimit did not start");
    }
}

impl Drop for GlobalRouter {
    fn drop(&mut self) {
        let _ = self.envoy.kill();
        let _ = self.envoy.wait();
    }
}
