//! `metrics-agent`: scrape model-server pods, push routing snapshots to Envoy.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use clap::{Parser, Subcommand};
use infergate_core::config::{Engine, InfergateConfig};
use infergate_core::global::summarize;
use infergate_core::replicas::ReplicaDigest;
use infergate_core::snapshot::Snapshot;
use infergate_core::wire::path::{SNAPSHOT as SNAPSHOT_PATH, SUMMARY as SUMMARY_PATH};
use infergate_metrics_agent::FleetScraper;
use infergate_metrics_agent::discovery::kubernetes::{self, ControlEndpoints, NamespacedName};
use infergate_metrics_agent::discovery::{Fleet, config_file};
use infergate_metrics_agent::load_exchange::LoadExchange;
use infergate_metrics_agent::push::Pusher;
use infergate_metrics_agent::replicas::ReplicaExchange;
use infergate_metrics_agent::scrape::{fetch_metrics, unix_ms};
use infergate_metrics_agent::telemetry::{self, PodLabel, TargetLabel, Telemetry};
use infergate_metrics_agent::token::ControlToken;
use infergate_signals::engines;

/// Scrapes every pod of every pool (GET /metrics) on a fixed interval, normalizes the
/// engine's metrics into routing signals, and pushes one MessagePack snapshot per
/// interval to each Envoy control listener. Pods are listed in infergate.yaml or found
/// in Kubernetes by label or InferencePool; a pod appearing or leaving, or a config
/// change, is pushed at once.
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the scrape-and-push loop until SIGTERM or Ctrl-C.
    Run(Box<RunArgs>),
    /// Print one pod's normalized signals as JSON, to debug what the router will see.
    Parse(ParseArgs),
    /// Print the InferenceGatewayConfig CustomResourceDefinition as YAML.
    Crd,
}

#[derive(clap::Args)]
struct RunArgs {
    /// The infergate.yaml that lists pools, pods and the scrape interval. It is read
    /// again every second; a valid change is pushed at once, an invalid one is logged
    /// with its line and the running config is kept.
    #[arg(short, long, default_value = "infergate.yaml")]
    config: PathBuf,
    /// Take the config from this InferenceGatewayConfig resource (NAMESPACE/NAME)
    /// instead of --config, and follow its changes. Uses the in-cluster service
    /// account, or KUBECONFIG.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    config_resource: Option<NamespacedName>,
    /// Control listener base URL of each gateway replica; repeat for several. Defaults
    /// to http://<gateway.control> from the config.
    #[arg(long = "control")]
    controls: Vec<String>,
    /// Push to every ready endpoint of this Service (NAMESPACE/NAME, the
    /// `infergate-control` Service that infergate-envoy-config renders), followed as
    /// gateway replicas come and go, instead of to --control. Pushing through the
    /// Service would reach one replica per push. Uses the in-cluster service account,
    /// or KUBECONFIG.
    #[arg(long, value_name = "NAMESPACE/NAME", conflicts_with = "controls")]
    control_service: Option<NamespacedName>,
    /// File holding the bearer token shared with Envoy.
    #[arg(long, conflicts_with = "token_env", required_unless_present = "token_env")]
    token_file: Option<PathBuf>,
    /// Environment variable holding the bearer token shared with Envoy.
    #[arg(long)]
    token_env: Option<String>,
    /// Timeout of one push to one gateway, milliseconds.
    #[arg(long, default_value_t = 1000)]
    push_timeout_ms: u64,
    /// Tier 2: this cluster's name in the global router's config. With --summary-to,
    /// each round also sends the cluster's summary there.
    #[arg(long, requires = "summary_to")]
    cluster: Option<String>,
    /// Tier 2: control listener base URL of each global router replica; repeat for
    /// several.
    #[arg(long, requires = "cluster")]
    summary_to: Vec<String>,
    /// Tier 2: file holding the global routers' bearer token (default: the gateway's).
    #[arg(long, requires = "summary_to")]
    summary_token_file: Option<PathBuf>,
    /// With two or more gateway replicas, push each one the others' in-flight load
    /// every this many milliseconds between snapshots (POST /v1/load), so that
    /// requests reaching different replicas at the same moment are not decided blind
    /// to each other. 0 leaves the loads to the snapshots alone (one to two scrape
    /// intervals late). Each push is about 60 bytes per pod with requests in flight.
    /// At most 100: gateways stop counting on pushes 200 ms after the last.
    #[arg(long, default_value_t = 5, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=100))]
    load_exchange_ms: u64,
    /// Where to serve the agent's own /metrics, /healthz and /readyz.
    #[arg(long, default_value = "127.0.0.1:9903")]
    listen: std::net::SocketAddr,
}

#[derive(clap::Args)]
struct ParseArgs {
    /// The engine whose metric names to read; `auto` recognizes it from the names.
    #[arg(long, value_enum, default_value = "auto")]
    engine: EngineArg,
    /// A file of Prometheus text, or an http:// URL to scrape.
    source: String,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum EngineArg {
    Auto,
    Vllm,
    Sglang,
    Trtllm,
    Triton,
    LlamaCpp,
}

impl From<EngineArg> for Engine {
    fn from(value: EngineArg) -> Self {
        match value {
            EngineArg::Auto => Engine::Auto,
            EngineArg::Vllm => Engine::Vllm,
            EngineArg::Sglang => Engine::Sglang,
            EngineArg::Trtllm => Engine::Trtllm,
            EngineArg::Triton => Engine::Triton,
            EngineArg::LlamaCpp => Engine::LlamaCpp,
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let result = match Cli::parse().command {
        Command::Run(args) => run(*args).await,
        Command::Parse(args) => parse(args).await,
        Command::Crd => kubernetes::crd_yaml().map(|yaml| print!("{yaml}")).map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

async fn parse(args: ParseArgs) -> Result<(), String> {
    let text = if args.source.starts_with("http://") || args.source.starts_with("https://") {
        fetch_metrics(&reqwest::Client::new(), &args.source, Duration::from_secs(5))
            .await
            .map_err(|e| format!("cannot scrape {}: {e}", args.source))?
    } else {
        std::fs::read_to_string(&args.source).map_err(|e| format!("cannot read {}: {e}", args.source))?
    };
    let scraped = engines::scrape(args.engine.into(), &text).map_err(|e| e.to_string())?;
    let json = serde_json::to_string_pretty(&scraped.signals).map_err(|e| e.to_string())?;
    println!("{json}");
    if !scraped.unknown.is_empty() {
        eprintln!(
            "unknown (null above; the router estimates them from its in-flight counts): {}",
            scraped.unknown.join(", ")
        );
    }
    Ok(())
}

async fn run(args: RunArgs) -> Result<(), String> {
    let token = match (&args.token_file, &args.token_env) {
        (Some(path), _) => ControlToken::from_file(path)?,
        (None, Some(var)) => ControlToken::new(&std::env::var(var).unwrap_or_default())
            .ok_or_else(|| format!("the environment variable {var} is empty or unset"))?,
        (None, None) => return Err("give --token-file or --token-env".into()),
    };
    let telemetry = Telemetry::new();
    let served = Arc::clone(&telemetry);
    let listen = args.listen;
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let server = tokio::spawn(async move {
        if let Err(e) = telemetry::serve(listener, served).await {
            tracing::error!(%listen, error = %e, "cannot serve /metrics, /healthz and /readyz");
        }
    });
    tracing::info!(%listen, "serving /metrics, /healthz and /readyz");
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    let (config, kube) = tokio::select! {
        () = &mut shutdown => return Ok(()),
        sources = start_config_source(&args) => sources?,
    };
    let initial = Arc::clone(&config.borrow());
    let needs_kube = args.control_service.is_some() || initial.pools.iter().any(|p| p.discovery.is_some());
    let kube = match kube {
        Some(client) => Some(client),
        None if needs_kube => Some(kube_client().await?),
        None => None,
    };
    let (controls, mut gateway_changes) = match (&args.control_service, &kube) {
        (Some(service), Some(client)) => {
            let (sender, receiver) = watch::channel(None);
            tokio::spawn(kubernetes::follow_control_service(client.clone(), service.clone(), sender));
            tracing::info!(%service, "pushing to the ready endpoints of the control Service");
            (Vec::new(), Some(receiver))
        }
        _ if args.controls.is_empty() => (vec![format!("http://{}", initial.gateway.control)], None),
        _ => (args.controls.clone(), None),
    };
    let client = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let push_timeout = Duration::from_millis(args.push_timeout_ms);
    let mut summaries = match &args.cluster {
        Some(cluster) => {
            let summary_token = match &args.summary_token_file {
                Some(path) => ControlToken::from_file(path)?,
                None => token.clone(),
            };
            let pusher =
                Pusher::new(client.clone(), args.summary_to.clone(), SUMMARY_PATH, summary_token, push_timeout);
            tracing::info!(%cluster, targets = ?pusher.targets(), "sending this cluster's summaries to the global routers");
            Some(SummarySender { cluster: cluster.clone(), pusher, interval_ms: initial.agent.scrape_interval_ms })
        }
        None => None,
    };
    let mut pusher = Pusher::new(client.clone(), controls, SNAPSHOT_PATH, token.clone(), push_timeout);
    // A replica that stops answering for three rounds no longer counts its requests.
    let exchange =
        Arc::new(Mutex::new(ReplicaExchange::new(Duration::from_millis(3 * initial.agent.scrape_interval_ms))));
    let load_exchange = (args.load_exchange_ms > 0).then(|| {
        tokio::spawn(
            LoadExchange {
                client: client.clone(),
                token: token.clone(),
                interval: Duration::from_millis(args.load_exchange_ms),
                exchange: Arc::clone(&exchange),
                telemetry: Arc::clone(&telemetry),
            }
            .run(),
        )
    });
    telemetry.track_gateways(pusher.targets().iter().map(String::as_str));
    tracing::info!(interval_ms = initial.agent.scrape_interval_ms, targets = ?pusher.targets(), "metrics-agent started");
    let mut fleet_changes = follow_fleet(config, kube);
    let mut scraper = FleetScraper::new(client, fleet_changes.borrow_and_update().clone());
    let pod_names =
        |scraper: &FleetScraper| scraper.targets().iter().map(|t| t.endpoint.to_string()).collect::<Vec<_>>();
    telemetry.track_pods(pod_names(&scraper).iter().map(String::as_str));
    let mut next_round = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            () = tokio::time::sleep_until(next_round) => {}
            changed = fleet_changes.changed() => {
                if changed.is_err() {
                    break;
                }
                let fleet = fleet_changes.borrow_and_update().clone();
                let pods_changed = scraper.set_fleet(fleet);
                telemetry.fleet_changes.inc();
                if pods_changed {
                    telemetry.track_pods(pod_names(&scraper).iter().map(String::as_str));
                }
                tracing::info!(pods = scraper.targets().len(), pods_changed, "fleet changed; pushing now");
            }
            Some(gateways) = next_change(&mut gateway_changes) => {
                pusher.set_targets(gateways);
                telemetry.track_gateways(pusher.targets().iter().map(String::as_str));
                tracing::info!(targets = ?pusher.targets(), "gateway replicas changed; pushing now");
            }
        }
        let interval = Duration::from_millis(scraper.config().agent.scrape_interval_ms);
        // Up to ±10% jitter, so that agent replicas do not scrape the fleet in lockstep.
        next_round = tokio::time::Instant::now() + interval.mul_f64(0.9 + fastrand::f64() * 0.2);
        let snapshot = round(&mut scraper, &mut pusher, &exchange, &telemetry).await;
        if let (Some(sender), Some((snapshot, gateway_healthy))) = (summaries.as_mut(), snapshot) {
            sender.send(&snapshot, gateway_healthy, &telemetry).await;
        }
    }
    server.abort();
    if let Some(task) = load_exchange {
        task.abort();
    }
    tracing::info!("metrics-agent stopped");
    Ok(())
}

/// The next set of gateway replicas, once the control Service's endpoints are listed;
/// never, when the gateways are given on the command line.
async fn next_change(changes: &mut Option<watch::Receiver<Option<ControlEndpoints>>>) -> Option<ControlEndpoints> {
    let Some(receiver) = changes else { return std::future::pending().await };
    match receiver.changed().await {
        Ok(()) => receiver.borrow_and_update().clone(),
        // The follower has stopped: keep pushing to the last known replicas.
        Err(_) => {
            *changes = None;
            None
        }
    }
}

/// The config's source: the `InferenceGatewayConfig` named by `--config-resource`, or
/// the config file, each followed for changes. Also returns the Kubernetes client if
/// one was needed.
async fn start_config_source(
    args: &RunArgs,
) -> Result<(watch::Receiver<Arc<InfergateConfig>>, Option<kube::Client>), String> {
    if let Some(resource) = &args.config_resource {
        let client = kube_client().await?;
        let (sender, mut receiver) = watch::channel(None);
        tokio::spawn(kubernetes::follow_config(client.clone(), resource.clone(), sender));
        tracing::info!(%resource, "waiting for the InferenceGatewayConfig");
        let first = receiver
            .wait_for(Option::is_some)
            .await
            .map_err(|_| format!("stopped following the InferenceGatewayConfig {resource}"))?
            .clone()
            .ok_or("unreachable: waited for a config")?;
        let (config_sender, config_receiver) = watch::channel(first);
        tokio::spawn(async move {
            while receiver.changed().await.is_ok() {
                let next = receiver.borrow_and_update().clone();
                if let Some(config) = next {
                    config_sender.send_replace(config);
                }
            }
        });
        return Ok((config_receiver, Some(client)));
    }
    let text = std::fs::read_to_string(&args.config)
        .map_err(|e| format!("cannot read the config {}: {e}", args.config.display()))?;
    let config =
        InfergateConfig::from_yaml_str(&text, &args.config.display().to_string()).map_err(|e| e.to_string())?;
    let (sender, receiver) = watch::channel(Arc::new(config));
    tokio::spawn(config_file::follow(args.config.clone(), text, sender));
    Ok((receiver, None))
}

async fn kube_client() -> Result<kube::Client, String> {
    kube::Client::try_default()
        .await
        .map_err(|e| format!("Kubernetes discovery needs API access (in-cluster service account or KUBECONFIG): {e}"))
}

/// Joins config changes and discovered pods into one `Fleet` that the loop follows.
fn follow_fleet(
    mut configs: watch::Receiver<Arc<InfergateConfig>>,
    kube: Option<kube::Client>,
) -> watch::Receiver<Fleet> {
    let (updates_sender, mut updates) = mpsc::unbounded_channel();
    let discovering = kube.is_some();
    if let Some(client) = kube {
        tokio::spawn(kubernetes::follow_pools(client, configs.clone(), updates_sender));
    }
    let (fleet_sender, fleet) = watch::channel(Fleet::new(Arc::clone(&configs.borrow_and_update())));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                changed = configs.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let config = Arc::clone(&configs.borrow_and_update());
                    if !discovering && config.pools.iter().any(|p| p.discovery.is_some()) {
                        tracing::error!("the new config has a pool with `discovery`, but this agent started without Kubernetes access; restart it to discover pods");
                    }
                    fleet_sender.send_modify(|fleet| fleet.set_config(config));
                }
                Some(update) = updates.recv() => {
                    fleet_sender.send_if_modified(|fleet| fleet.apply(update));
                }
            }
        }
    });
    fleet
}

/// One scrape of every pod and one push to every gateway, each replica's snapshot with
/// the others' digest. Returns the snapshot and whether a gateway accepted it.
async fn round(
    scraper: &mut FleetScraper,
    pusher: &mut Pusher,
    exchange: &Mutex<ReplicaExchange>,
    telemetry: &Telemetry,
) -> Option<(Snapshot, bool)> {
    let scrape_started = Instant::now();
    let snapshot = scraper.scrape().await;
    telemetry.scrape_seconds.observe(scrape_started.elapsed().as_secs_f64());
    telemetry.pods.set(i64::try_from(scraper.targets().len()).unwrap_or(i64::MAX));
    for pod in scraper.failed_last_round() {
        telemetry.scrape_errors.get_or_create(&PodLabel { pod: pod.to_string() }).inc();
    }
    telemetry.snapshots.inc();
    let mut snapshot = snapshot;
    let bodies = {
        let mut exchange = exchange.lock().unwrap_or_else(PoisonError::into_inner);
        exchange.set_targets(pusher.targets());
        let started = Instant::now();
        let mut bodies = Vec::with_capacity(pusher.targets().len());
        for index in 0..pusher.targets().len() {
            snapshot.peers = exchange.outgoing(index, started);
            match snapshot.encode() {
                Ok(bytes) => bodies.push(bytes::Bytes::from(bytes)),
                Err(e) => {
                    tracing::error!(error = %e, "cannot encode the snapshot");
                    return None;
                }
            }
        }
        bodies
    };
    snapshot.peers = Default::default();
    let size = bodies.first().map_or(0, bytes::Bytes::len);
    telemetry.snapshot_bytes.set(i64::try_from(size).unwrap_or(i64::MAX));
    let push_started = Instant::now();
    let attempts = pusher.push_each(bodies).await;
    telemetry.push_seconds.observe(push_started.elapsed().as_secs_f64());
    let now = Instant::now();
    let mut all_ok = true;
    let mut any_accepted = false;
    let mut exchange = exchange.lock().unwrap_or_else(PoisonError::into_inner);
    for (index, (target, attempt)) in pusher.targets().iter().zip(attempts).enumerate() {
        let label = TargetLabel { target: target.clone() };
        // Created at 0 on the first round, so that the series exists before a failure.
        let push_errors = telemetry.push_errors.get_or_create(&label);
        if let Some(Ok(answer)) = &attempt.result {
            take_digest(&mut exchange, index, target, answer, push_started, telemetry);
        }
        // A push held back by the backoff (`None`) changes nothing.
        if let Some(result) = &attempt.result {
            exchange.pushed(index, result.is_ok());
        }
        match attempt.result {
            Some(Ok(_)) if attempt.was_failing => {
                any_accepted = true;
                tracing::info!(%target, "push recovered");
            }
            Some(Ok(_)) => {
                any_accepted = true;
                tracing::debug!(%target, sequence = snapshot.sequence, bytes = size, "pushed");
            }
            Some(Err(e)) => {
                all_ok = false;
                push_errors.inc();
                if !attempt.was_failing {
                    tracing::warn!(%target, error = %e, "push failed; retrying with backoff");
                }
            }
            None => all_ok = false,
        }
        let age = attempt.last_success.map_or(f64::INFINITY, |at| now.saturating_duration_since(at).as_secs_f64());
        telemetry.push_age_seconds.get_or_create(&label).set(age);
    }
    telemetry.set_ready(all_ok && !pusher.targets().is_empty());
    Some((snapshot, any_accepted))
}

/// A replica's answer to its push: its digest, for the other replicas. An empty answer
/// is a lone replica's (or an older gateway's); one that does not decode is logged.
fn take_digest(
    exchange: &mut ReplicaExchange,
    index: usize,
    target: &str,
    answer: &[u8],
    sent: Instant,
    telemetry: &Telemetry,
) {
    if answer.is_empty() {
        return;
    }
    match ReplicaDigest::decode(answer) {
        Ok(digest) => {
            telemetry.replica_records.inc_by(digest.records.len() as u64);
            let dropped = exchange.dropped();
            exchange.incoming(index, digest, sent);
            if exchange.dropped() > dropped {
                tracing::warn!(%target, dropped = exchange.dropped() - dropped, "a replica's inbox is full: its oldest prefix records were dropped");
            }
        }
        Err(e) => tracing::warn!(%target, error = %e, "the gateway's answer is not a replica digest; ignored"),
    }
}

/// Tier 2: this cluster's summary to every global router, after each round.
struct SummarySender {
    cluster: String,
    pusher: Pusher,
    /// The scrape interval: a summary goes out after each round.
    interval_ms: u64,
}

impl SummarySender {
    async fn send(&mut self, snapshot: &Snapshot, gateway_healthy: bool, telemetry: &Telemetry) {
        let summary =
            summarize(snapshot, &self.cluster, snapshot.sequence, gateway_healthy, unix_ms(), self.interval_ms);
        let bytes = match summary.encode() {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode the summary");
                return;
            }
        };
        let attempts = self.pusher.push(bytes.into()).await;
        for (target, attempt) in self.pusher.targets().iter().zip(attempts) {
            let push_errors = telemetry.push_errors.get_or_create(&TargetLabel { target: target.clone() });
            match attempt.result {
                Some(Err(e)) => {
                    push_errors.inc();
                    if !attempt.was_failing {
                        tracing::warn!(%target, error = %e, "summary push failed; retrying with backoff");
                    }
                }
                Some(Ok(_)) if attempt.was_failing => tracing::info!(%target, "summary push recovered"),
                _ => {}
            }
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = ctrl_c.await;
}
