//! One whole gateway on loopback: the simulated fleet, Envoy with the filter, and the
//! agent, each on ports chosen for this test so that tests run side by side.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use infergate_core::config::{
    AgentSettings, Criticality, Disaggregation, Engine, FlowControlSettings, GatewaySettings, IdentitySettings,
    InfergateConfig, ModelConfig, PoolConfig, RoutingSettings,
};
use infergate_core::endpoint::Endpoint;
use infergate_core::snapshot::{PodSignals, PodState, PoolState, SNAPSHOT_VERSION, Snapshot};
use infergate_core::wire::path::SNAPSHOT as SNAPSHOT_PATH;
use infergate_envoy_config::{RenderOptions, UpstreamPolicy, render_bootstrap_yaml};
use infergate_model_sim::engine::EngineProfile;
use infergate_model_sim::server::PodSpec;
use serde_json::Value;

use crate::artifacts;
use crate::client::{Reply, chat_body, read_reply};
use crate::fleet::Fleet;
use crate::picker::PickerProcess;

pub const TOKEN: &str = "e2e-test-token-7f3a";

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A served model: its name, its pool, and the LoRA adapter it is, if any.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    pub name: String,
    pub pool: String,
    pub adapter: Option<String>,
    pub criticality: Criticality,
}

impl ModelSpec {
    pub fn base(name: &str, pool: &str) -> Self {
        Self { name: name.into(), pool: pool.into(), adapter: None, criticality: Criticality::Standard }
    }

    pub fn lora(name: &str, pool: &str, adapter: &str) -> Self {
        Self { adapter: Some(adapter.into()), ..Self::base(name, pool) }
    }

    pub fn with_criticality(self, criticality: Criticality) -> Self {
        Self { criticality, ..self }
    }
}

/// Writes Envoy's bootstrap for the stack's config in place of the plain renderer: how a
/// test runs what a platform (Envoy Gateway, Istio) would hand its Envoy.
#[derive(Clone)]
pub struct BootstrapWriter(pub Arc<dyn Fn(&InfergateConfig) -> String + Send + Sync>);

impl std::fmt::Debug for BootstrapWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BootstrapWriter")
    }
}

/// Shapes a simulated pod's spec, given its index in the fleet: its prefill/decode
/// role, say.
#[derive(Clone)]
pub struct PodShaper(pub Arc<dyn Fn(usize, PodSpec) -> PodSpec + Send + Sync>);

impl std::fmt::Debug for PodShaper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PodShaper")
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct StackSpec {
    /// Pool name and pod count.
    pub pools: Vec<(&'static str, usize)>,
    pub models: Vec<ModelSpec>,
    pub max_body_bytes: u64,
    /// Route before the body ends (`gateway.early_decision`).
    pub early_decision: bool,
    pub envoy_concurrency: u32,
    pub profile: EngineProfile,
    /// The simulated pods' time scale (2.0 runs them at half speed).
    pub time_scale: f64,
    pub start_agent: bool,
    pub routing: RoutingSettings,
    pub flow_control: FlowControlSettings,
    /// Where a request's tenant comes from (`identity:`).
    pub identity: IdentitySettings,
    /// infergate, or one of Envoy's own policies as a baseline (no filter, no agent).
    pub upstream_policy: UpstreamPolicy,
    pub access_log: bool,
    /// The agent's scrape interval; its per-pod timeout is 80% of it.
    pub scrape_interval_ms: u64,
    /// Near-instant pods instead of simulated engines, to measure the gateway alone.
    pub instant_pods: bool,
    /// The route's timeout for a whole request.
    pub request_timeout_ms: u64,
    /// Start Envoy able to hot-restart (`--restart-epoch 0`), for [`Stack::hot_restart`].
    pub hot_restart: bool,
    /// Envoy's bootstrap from this instead of `infergate-envoy-config`'s plain render.
    pub bootstrap: Option<BootstrapWriter>,
    /// Pods started elsewhere (real engines) instead of the simulated fleet: their
    /// engine and addresses, in pool order.
    pub external_pods: Option<(Engine, Vec<SocketAddr>)>,
    /// Gateway replicas: separate Envoys, each on ports of its own, and one agent that
    /// pushes to all of them (active-active). The first is the stack's own.
    pub replicas: usize,
    /// Route with `infergate-epp` over Envoy's ext_proc instead of the filter; the
    /// agent pushes to the picker.
    pub ext_proc: bool,
    /// With `ext_proc`, this many pickers, active-active behind the one Envoy.
    pub pickers: usize,
    /// The agent's `--load-exchange-ms`; `None`: its default.
    pub load_exchange_ms: Option<u64>,
    /// The first pool's prefill/decode disaggregation, and how many of its first pods
    /// only prefill; the rest only decode (the harness lists their addresses).
    pub disaggregation: Option<(Disaggregation, usize)>,
    /// Shapes each simulated pod's spec (not instant or external pods).
    pub pod_shaper: Option<PodShaper>,
}

impl Default for StackSpec {
    fn default() -> Self {
        Self {
            pools: vec![("a", 4)],
            models: vec![ModelSpec::base("m", "a")],
            max_body_bytes: 256 * 1024,
            early_decision: GatewaySettings::default().early_decision,
            envoy_concurrency: 2,
            profile: EngineProfile::TINY,
            time_scale: 1.0,
            start_agent: true,
            routing: RoutingSettings::default(),
            flow_control: FlowControlSettings::default(),
            identity: IdentitySettings::default(),
            upstream_policy: UpstreamPolicy::Infergate,
            access_log: true,
            scrape_interval_ms: 50,
            instant_pods: false,
            request_timeout_ms: 30_000,
            hot_restart: false,
            bootstrap: None,
            external_pods: None,
            replicas: 1,
            ext_proc: false,
            pickers: 1,
            load_exchange_ms: None,
            disaggregation: None,
            pod_shaper: None,
        }
    }
}

pub struct Stack {
    pub fleet: Fleet,
    pub config: InfergateConfig,
    pub gateway_url: String,
    pub control_url: String,
    pub admin_url: String,
    /// The agent's own endpoints (`/metrics`, `/healthz`, `/readyz`).
    pub agent_url: String,
    client: reqwest::Client,
    envoy: Option<Child>,
    /// The hot-restart epoch of the running Envoy, if it can hot-restart.
    epoch: Option<u32>,
    agent: Option<Child>,
    /// The replicas after the first, with `replicas > 1`.
    pub more_replicas: Vec<GatewayReplica>,
    /// `infergate-epp`, with `ext_proc`: one, or several active-active.
    pub pickers: Vec<PickerProcess>,
    /// The agent's `--load-exchange-ms`, if the spec set it.
    load_exchange_ms: Option<u64>,
    dir: tempfile::TempDir,
}

/// A gateway replica beside the stack's first: its own Envoy and ports, the same fleet
/// and agent.
pub struct GatewayReplica {
    pub gateway_url: String,
    pub control_url: String,
    pub admin_url: String,
    envoy: Child,
}

impl Drop for GatewayReplica {
    fn drop(&mut self) {
        let _ = self.envoy.kill();
        let _ = self.envoy.wait();
    }
}

/// Starts Envoy on the bootstrap at `path` with `concurrency` workers, no hot restart,
/// the tests' control token, and its log to `log`.
pub fn spawn_envoy(path: &std::path::Path, concurrency: u32, log: Stdio) -> Child {
    Command::new(artifacts::envoy())
        .arg("-c")
        .arg(path)
        .args(["--concurrency", &concurrency.to_string(), "--log-level", "info", "--disable-hot-restart"])
        .env("INFERGATE_CONTROL_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start envoy on {}: {e}", path.display()))
}

/// A free port below Linux's ephemeral range (32768+), so that no outgoing connection
/// of this machine takes it between now and Envoy's bind; distinct within this process.
pub fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let _ =
        NEXT.compare_exchange(0, 20_000 + (std::process::id() % 400) as u16 * 30, Ordering::SeqCst, Ordering::SeqCst);
    loop {
        let port = NEXT.fetch_add(1, Ordering::SeqCst);
        if port >= 32_000 {
            NEXT.store(20_000, Ordering::SeqCst);
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

impl Stack {
    pub async fn start(spec: StackSpec) -> Stack {
        let total: usize = spec.pools.iter().map(|(_, n)| n).sum();
        let adapters: Vec<String> = spec.models.iter().filter_map(|m| m.adapter.clone()).collect();
        let fleet = if let Some((_, pods)) = &spec.external_pods {
            Fleet::external(pods.clone())
        } else if spec.instant_pods {
            Fleet::start_instant(total).await
        } else if let Some(shaper) = &spec.pod_shaper {
            Fleet::start_shaped(total, spec.profile, spec.time_scale, &[], &adapters, &*shaper.0).await
        } else {
            Fleet::start(total, spec.profile, spec.time_scale, &adapters).await
        };
        let mut pods = fleet.pods.iter().copied();
        let mut pools: Vec<PoolConfig> = spec
            .pools
            .iter()
            .map(|&(name, count)| PoolConfig {
                name: name.to_string(),
                metrics_path: None,
                engine: spec.external_pods.as_ref().map(|(engine, _)| *engine).unwrap_or_default(),
                endpoints: pods.by_ref().take(count).map(Endpoint::new).collect(),
                discovery: None,
                profile: None,
                weights: None,
                disaggregation: None,
            })
            .collect();
        if let (Some((disaggregation, prefill_pods)), Some(pool)) = (&spec.disaggregation, pools.first_mut()) {
            let (prefill, decode) = pool.endpoints.split_at((*prefill_pods).min(pool.endpoints.len()));
            pool.disaggregation = Some(Disaggregation {
                prefill_endpoints: prefill.to_vec(),
                decode_endpoints: decode.to_vec(),
                ..disaggregation.clone()
            });
        }
        let models = spec
            .models
            .iter()
            .map(|m| ModelConfig {
                name: m.name.clone(),
                pool: m.pool.clone(),
                adapter: m.adapter.clone(),
                criticality: m.criticality,
            })
            .collect();
        let config = InfergateConfig {
            version: 1,
            gateway: GatewaySettings {
                listen: loopback(free_port()),
                control: loopback(free_port()),
                admin: loopback(free_port()),
                max_body_bytes: spec.max_body_bytes,
                request_timeout_ms: spec.request_timeout_ms,
                retries: 2,
                early_decision: spec.early_decision,
            },
            agent: AgentSettings {
                scrape_interval_ms: spec.scrape_interval_ms,
                scrape_timeout_ms: spec.scrape_interval_ms * 4 / 5,
            },
            routing: spec.routing,
            flow_control: spec.flow_control.clone(),
            identity: spec.identity.clone(),
            pools,
            models,
        };
        config.validate().expect("the test config is valid");
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut stack = Stack {
            gateway_url: format!("http://{}", config.gateway.listen),
            control_url: format!("http://{}", config.gateway.control),
            admin_url: format!("http://{}", config.gateway.admin),
            agent_url: format!("http://127.0.0.1:{}", free_port()),
            fleet,
            config,
            client: reqwest::Client::new(),
            envoy: None,
            epoch: None,
            agent: None,
            more_replicas: Vec::new(),
            pickers: Vec::new(),
            load_exchange_ms: spec.load_exchange_ms,
            dir,
        };
        stack.write_config();
        if spec.ext_proc {
            for index in 0..spec.pickers.max(1) {
                let picker = PickerProcess::start(stack.dir.path(), index, &stack.client).await;
                stack.pickers.push(picker);
            }
        }
        stack.write_bootstrap(spec.upstream_policy, spec.access_log, spec.bootstrap.as_ref());
        stack.epoch = spec.hot_restart.then_some(0);
        stack.start_envoy(spec.envoy_concurrency).await;
        for index in 1..spec.replicas {
            let replica = stack.start_replica(index, spec.envoy_concurrency, spec.upstream_policy).await;
            stack.more_replicas.push(replica);
        }
        if spec.start_agent && spec.upstream_policy == UpstreamPolicy::Infergate {
            stack.start_agent().await;
        }
        stack
    }

    /// A file in this stack's directory (its config, logs, and test inputs).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The stack's `infergate.yaml` and token, read by the agent and the picker.
    fn write_config(&self) {
        let yaml = serde_yaml_ng::to_string(&self.config).expect("config to YAML");
        std::fs::write(self.path("infergate.yaml"), yaml).expect("write infergate.yaml");
        std::fs::write(self.path("token"), TOKEN).expect("write the token");
    }

    /// Envoy's bootstrap, for the filter, a baseline or the picker.
    fn write_bootstrap(&self, upstream_policy: UpstreamPolicy, access_log: bool, writer: Option<&BootstrapWriter>) {
        let options = RenderOptions {
            upstream_policy,
            access_log,
            ext_proc: self.pickers.iter().map(|p| p.grpc).collect(),
            ..artifacts::render_options()
        };
        let bootstrap = match writer {
            Some(writer) => (writer.0)(&self.config),
            None => render_bootstrap_yaml(&self.config, &options).expect("render the bootstrap"),
        };
        std::fs::write(self.path("envoy.yaml"), bootstrap).expect("write envoy.yaml");
    }

    fn log_file(&self, name: &str) -> Stdio {
        Stdio::from(std::fs::File::create(self.path(name)).expect("create a log file"))
    }

    /// Shared-memory id of this stack's hot-restart family: distinct per stack.
    fn base_id(&self) -> String {
        (u32::from(self.config.gateway.admin.port()) * 10 + std::process::id() % 10).to_string()
    }

    fn envoy_command(&self, concurrency: u32) -> Command {
        let mut command = Command::new(artifacts::envoy());
        command
            .arg("-c")
            .arg(self.path("envoy.yaml"))
            .args(["--concurrency", &concurrency.to_string(), "--log-level", "info"])
            // A listener replaced through LDS drains this long before it goes.
            .args(["--drain-time-s", "1"])
            .env("INFERGATE_CONTROL_TOKEN", TOKEN);
        match self.epoch {
            Some(epoch) => command.args([
                "--base-id",
                &self.base_id(),
                "--restart-epoch",
                &epoch.to_string(),
                "--parent-shutdown-time-s",
                "2",
            ]),
            None => command.arg("--disable-hot-restart"),
        };
        command
    }

    async fn start_envoy(&mut self, concurrency: u32) {
        let child = self
            .envoy_command(concurrency)
            .stdout(self.log_file("envoy.out"))
            .stderr(self.log_file("envoy.log"))
            .spawn()
            .expect("start envoy");
        self.envoy = Some(child);
        let ready = format!("{}/ready", self.admin_url);
        let client = self.client.clone();
        self.wait_until("Envoy to become ready", Duration::from_secs(30), || {
            let (client, ready) = (client.clone(), ready.clone());
            async move { client.get(&ready).send().await.is_ok_and(|r| r.status().is_success()) }
        })
        .await;
    }

    /// Starts replica `index` (1 and up): the stack's config on ports of its own.
    async fn start_replica(&self, index: usize, concurrency: u32, policy: UpstreamPolicy) -> GatewayReplica {
        let mut config = self.config.clone();
        config.gateway.listen = loopback(free_port());
        config.gateway.control = loopback(free_port());
        config.gateway.admin = loopback(free_port());
        let options = RenderOptions { upstream_policy: policy, access_log: false, ..artifacts::render_options() };
        let bootstrap = render_bootstrap_yaml(&config, &options).expect("render a replica's bootstrap");
        let path = self.path(&format!("envoy-{index}.yaml"));
        std::fs::write(&path, bootstrap).expect("write a replica's bootstrap");
        let envoy = spawn_envoy(&path, concurrency, self.log_file(&format!("envoy-{index}.log")));
        let replica = GatewayReplica {
            gateway_url: format!("http://{}", config.gateway.listen),
            control_url: format!("http://{}", config.gateway.control),
            admin_url: format!("http://{}", config.gateway.admin),
            envoy,
        };
        let ready = format!("{}/ready", replica.admin_url);
        self.wait_until("a replica's Envoy to become ready", Duration::from_secs(30), || async {
            self.client.get(&ready).send().await.is_ok_and(|r| r.status().is_success())
        })
        .await;
        replica
    }

    /// Every replica's client URL, the stack's own first.
    pub fn gateway_urls(&self) -> Vec<String> {
        std::iter::once(self.gateway_url.clone())
            .chain(self.more_replicas.iter().map(|r| r.gateway_url.clone()))
            .collect()
    }

    /// Every replica's admin URL, the stack's own first.
    pub fn admin_urls(&self) -> Vec<String> {
        std::iter::once(self.admin_url.clone()).chain(self.more_replicas.iter().map(|r| r.admin_url.clone())).collect()
    }

    /// Starts the agent on this stack's infergate.yaml and waits for its first
    /// accepted push.
    pub async fn start_agent(&mut self) {
        let config = self.path("infergate.yaml");
        self.start_agent_with(&[std::ffi::OsStr::new("-c"), config.as_os_str()], &[]).await;
    }

    /// Starts the agent with these config arguments (and the stack's token and
    /// listener) and waits for its first accepted push.
    pub async fn start_agent_with(&mut self, config_args: &[&std::ffi::OsStr], env: &[(&str, &str)]) {
        let before = self.accepted_pushes().await;
        let child = Command::new(artifacts::metrics_agent())
            .arg("run")
            .args(config_args)
            .arg("--token-file")
            .arg(self.path("token"))
            .arg("--listen")
            .arg(self.agent_url.trim_start_matches("http://"))
            .args(self.replica_controls())
            .args(self.load_exchange_ms.iter().flat_map(|ms| ["--load-exchange-ms".to_string(), ms.to_string()]))
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(self.log_file("agent.log"))
            .spawn()
            .expect("start metrics-agent");
        self.agent = Some(child);
        self.wait_until("the agent's first accepted snapshot", Duration::from_secs(15), || async {
            self.accepted_pushes().await > before
        })
        .await;
    }

    /// Snapshot pushes the gateway (or its first picker) adopted.
    async fn accepted_pushes(&self) -> u64 {
        match self.pickers.first() {
            Some(picker) => picker.metric(&self.client, "infergate_epp_snapshots_accepted_total").await.unwrap_or(0),
            None => self.stat("infergate.control.accepted").await.unwrap_or(0),
        }
    }

    /// A metric of the first picker's `/metrics` (with `ext_proc`), by its exposed name.
    pub async fn picker_metric(&self, name: &str) -> Option<u64> {
        self.pickers.first()?.metric(&self.client, name).await
    }

    /// `--control` for every replica when there are several, or for each picker; none
    /// (the config's control listener) with one gateway that runs the filter.
    fn replica_controls(&self) -> Vec<String> {
        if !self.pickers.is_empty() {
            return self.pickers.iter().flat_map(|p| ["--control".to_string(), p.control_url.clone()]).collect();
        }
        if self.more_replicas.is_empty() {
            return Vec::new();
        }
        let controls = std::iter::once(&self.control_url).chain(self.more_replicas.iter().map(|r| &r.control_url));
        controls.flat_map(|url| ["--control".to_string(), url.clone()]).collect()
    }

    /// Hot-restarts Envoy: a new process of the next epoch takes the listeners over, the
    /// old one drains and exits. Returns once the old one has exited.
    pub async fn hot_restart(&mut self, concurrency: u32) {
        let epoch = self.epoch.expect("the stack was started with hot_restart");
        self.epoch = Some(epoch + 1);
        let log = self.path(&format!("envoy.{}.log", epoch + 1));
        let child = self
            .envoy_command(concurrency)
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(log).expect("create a log file")))
            .spawn()
            .expect("start the new envoy");
        let mut parent = self.envoy.replace(child).expect("an envoy to restart");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if parent.try_wait().ok().flatten().is_some() {
                break;
            }
            assert!(Instant::now() < deadline, "the old envoy did not exit after the hot restart");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What the agent has logged so far.
    pub fn agent_log(&self) -> String {
        std::fs::read_to_string(self.path("agent.log")).unwrap_or_default()
    }

    /// Envoy's process id, to measure its CPU and memory.
    pub fn envoy_pid(&self) -> Option<u32> {
        self.envoy.as_ref().map(Child::id)
    }

    /// The agent's process id, to measure its CPU and memory.
    pub fn agent_pid(&self) -> Option<u32> {
        self.agent.as_ref().map(Child::id)
    }

    /// Kills the agent, as a crash would.
    /// Kills this cluster's gateway (Envoy) outright, as a crash would.
    pub fn kill_envoy(&mut self) {
        if let Some(mut envoy) = self.envoy.take() {
            let _ = envoy.kill();
            let _ = envoy.wait();
        }
    }

    pub fn kill_agent(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            let _ = agent.kill();
            let _ = agent.wait();
        }
    }

    /// A `wasmcustom.*` counter or gauge from Envoy's stats.
    pub async fn stat(&self, name: &str) -> Option<u64> {
        self.envoy_stat(&format!("wasmcustom.{name}")).await
    }

    /// Any of Envoy's counters or gauges, by its full name.
    pub async fn envoy_stat(&self, name: &str) -> Option<u64> {
        self.envoy_stat_at(&self.admin_url, name).await
    }

    /// A `wasmcustom.*` counter or gauge of the replica whose admin is at `admin_url`.
    pub async fn replica_stat(&self, admin_url: &str, name: &str) -> Option<u64> {
        self.envoy_stat_at(admin_url, &format!("wasmcustom.{name}")).await
    }

    async fn envoy_stat_at(&self, admin_url: &str, name: &str) -> Option<u64> {
        let url = format!("{}/stats?filter=^{}$", admin_url, name.replace('.', "\\."));
        let text = self.client.get(url).send().await.ok()?.text().await.ok()?;
        text.lines()
            .filter_map(|line| line.split_once(": "))
            .find(|(key, _)| *key == name)
            .and_then(|(_, value)| value.trim().parse().ok())
    }

    pub async fn wait_until<F, Fut>(&self, what: &str, timeout: Duration, mut condition: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if condition().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("timed out after {timeout:?} waiting for {what}");
    }

    pub async fn post(&self, path: &str, body: impl Into<reqwest::Body>, headers: &[(&str, &str)]) -> Reply {
        self.post_at(&self.gateway_url, path, body, headers).await
    }

    /// As [`Self::post`], to the replica whose client URL is `gateway_url`.
    pub async fn post_at(
        &self,
        gateway_url: &str,
        path: &str,
        body: impl Into<reqwest::Body>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request =
            self.client.post(format!("{gateway_url}{path}")).header("content-type", "application/json").body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        read_reply(request.send().await.expect("the gateway answers")).await
    }

    pub async fn chat(&self, model: &str, max_tokens: u64) -> Reply {
        self.post("/v1/chat/completions", chat_body(model, "Hello there", max_tokens).to_string(), &[]).await
    }

    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Pins a pod's reported metrics through the sim's admin API.
    pub async fn pin(&self, pod: SocketAddr, waiting: f64, running: f64, kv_cache_usage: f64) {
        let body = serde_json::json!({"waiting": waiting, "running": running, "kv_cache_usage": kv_cache_usage});
        self.pin_json(pod, body).await;
    }

    pub async fn pin_json(&self, pod: SocketAddr, body: Value) {
        self.pod_admin(pod, "metrics", &body).await;
    }

    /// POSTs `body` to a simulated pod's `/admin/<what>` and checks it was taken.
    async fn pod_admin(&self, pod: SocketAddr, what: &str, body: &Value) {
        let response = self.client.post(format!("http://{pod}/admin/{what}")).json(body).send().await;
        let status = response.expect("the pod's admin API answers").status();
        assert!(status.is_success(), "POST /admin/{what} on {pod} failed: {status}");
    }

    /// Makes one pod clearly the best and the others clearly loaded.
    pub async fn favour(&self, best: SocketAddr, pods: &[SocketAddr]) {
        for &pod in pods {
            if pod == best {
                self.pin(pod, 0.0, 0.0, 0.05).await;
            } else {
                self.pin(pod, 100.0, 64.0, 0.95).await;
            }
        }
    }

    /// A valid, fresh snapshot of this stack's config in which `best` is idle and every
    /// other pod is saturated, for tests that push snapshots themselves.
    pub fn snapshot_favouring(&self, best: SocketAddr, sequence: u64) -> Snapshot {
        let now = unix_ms();
        let pools = self
            .config
            .pools
            .iter()
            .map(|pool| PoolState {
                name: pool.name.clone(),
                pods: pool
                    .endpoints
                    .iter()
                    .map(|&address| {
                        let idle = address.socket_addr() == best;
                        PodState::scraped(
                            address,
                            now,
                            PodSignals {
                                waiting: Some(if idle { 0.0 } else { 1000.0 }),
                                running: Some(if idle { 0.0 } else { 256.0 }),
                                kv_cache_usage: Some(if idle { 0.0 } else { 0.99 }),
                                ..PodSignals::default()
                            },
                        )
                    })
                    .collect(),
            })
            .collect();
        Snapshot {
            version: SNAPSHOT_VERSION,
            sequence,
            created_at_ms: now,
            routing: self.config.routing_config(),
            pools,
            peers: Default::default(),
        }
    }

    /// POSTs bytes to the control listener, with `token` as the bearer if given.
    pub async fn push_snapshot(&self, token: Option<&str>, body: Vec<u8>) -> u16 {
        let mut request = self.client.post(format!("{}{SNAPSHOT_PATH}", self.control_url)).body(body);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        request.send().await.expect("the control listener answers").status().as_u16()
    }

    /// Kills a pod: its port refuses connections from now on.
    /// Sets a simulated pod's faults (`hang`, `freeze_metrics`, `added_latency_ms`, …).
    pub async fn fault(&self, pod: SocketAddr, faults: Value) {
        self.pod_admin(pod, "faults", &faults).await;
    }

    pub async fn unpin(&self, pod: SocketAddr) {
        let _ = self.client.delete(format!("http://{pod}/admin/metrics")).send().await;
    }

    pub async fn kill_pod(&self, pod: SocketAddr) {
        let _ = self.client.post(format!("http://{pod}/admin/shutdown")).send().await;
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(pod).is_ok() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn dump_logs(&self) {
        let replicas = (1..=self.more_replicas.len()).map(|i| format!("envoy-{i}.log"));
        let pickers = (0..self.pickers.len()).map(crate::picker::log_name);
        let names =
            ["envoy.log", "envoy.out", "agent.log"].map(String::from).into_iter().chain(pickers).chain(replicas);
        for name in names {
            if let Ok(text) = std::fs::read_to_string(self.path(&name)) {
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                eprintln!("----- {name} (last {} lines) -----", tail.len());
                for line in tail.into_iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dump_logs();
        }
        self.kill_agent();
        if let Some(mut envoy) = self.envoy.take() {
            let _ = envoy.kill();
            let _ = envoy.wait();
        }
    }
}
