//! Tier 2 on loopback: a global Envoy running the filter in its `global` role in front
//! of several tier-1 stacks, each of whose agents sends it summaries.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use infergate_core::config::GatewaySettings;
use infergate_core::global::{ClassTargets, ClusterConfig, GlobalRouterConfig, GlobalSettings, RequestClass};
use infergate_envoy_config::{RenderOptions, render_global_bootstrap_yaml};

use crate::artifacts;
use crate::client::{Reply, chat_body, read_reply};
use crate::stack::{Stack, TOKEN, free_port, loopback};

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
    _dir: tempfile::TempDir,
}

impl GlobalRouter {
    /// Starts the global Envoy in front of `gateways` (each cluster's tier-1 listener).
    pub async fn start(local_region: &str, clusters: &[(ClusterSpec, SocketAddr)], summary_max_age_ms: u64) -> Self {
        let config = GlobalRouterConfig {
            version: 1,
            gateway: GatewaySettings {
                listen: loopback(free_port()),
                control: loopback(free_port()),
                admin: loopback(free_port()),
                max_body_bytes: 256 * 1024,
                request_timeout_ms: 30_000,
                retries: 2,
            },
            global: GlobalSettings {
                local_region: local_region.into(),
                summary_max_age_ms,
                default_class: RequestClass::Latency,
                targets: ClassTargets { latency_ttft_ms: 500.0, batch_ttft_ms: 30_000.0 },
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
        };
        config.validate().expect("the test's global config is valid");
        let dir = tempfile::tempdir().expect("a temp dir");
        let options = RenderOptions { explain: true, ..RenderOptions::new(artifacts::filter_wasm()) };
        let path = dir.path().join("global.yaml");
        std::fs::write(&path, render_global_bootstrap_yaml(&config, &options).expect("render")).expect("write");
        let log = std::fs::File::create(dir.path().join("envoy.log")).expect("a log file");
        let envoy = Command::new(artifacts::envoy())
            .arg("-c")
            .arg(&path)
            .args(["--concurrency", "2", "--disable-hot-restart", "--log-level", "info"])
            .env("INFERGATE_CONTROL_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start the global Envoy");
        let router = Self {
            url: format!("http://{}", config.gateway.listen),
            control_url: format!("http://{}", config.gateway.control),
            admin_url: format!("http://{}", config.gateway.admin),
            config,
            client: reqwest::Client::new(),
            envoy,
            _dir: dir,
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
        let config = stack.path("infergate.yaml");
        let args: Vec<std::ffi::OsString> = vec![
            "-c".into(),
            config.into_os_string(),
            "--cluster".into(),
            cluster.into(),
            "--summary-to".into(),
            self.control_url.clone().into(),
        ];
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        stack.start_agent_with(&refs, &[]).await;
    }

    pub async fn chat(&self, model: &str, class: Option<&str>) -> Reply {
        let mut request =
            self.client.post(format!("{}/v1/chat/completions", self.url)).json(&chat_body(model, "hello", 1));
        if let Some(class) = class {
            request = request.header("x-infergate-class", class);
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

impl Drop for GlobalRouter {
    fn drop(&mut self) {
        let _ = self.envoy.kill();
        let _ = self.envoy.wait();
    }
}
