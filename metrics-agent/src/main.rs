//! `metrics-agent`: scrape model-server pods, push routing snapshots to Envoy.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use infergate_core::config::{Engine, InfergateConfig};
use infergate_metrics_agent::push::Pusher;
use infergate_metrics_agent::scrape::fetch_metrics;
use infergate_metrics_agent::telemetry::{self, PodLabel, TargetLabel, Telemetry};
use infergate_metrics_agent::token::ControlToken;
use infergate_metrics_agent::{FleetScraper, engines};

/// Scrapes every pod listed in infergate.yaml (GET /metrics) on a fixed interval,
/// normalizes the engine's metrics into routing signals, and pushes one MessagePack
/// snapshot per interval to each Envoy control listener.
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the scrape-and-push loop until SIGTERM or Ctrl-C.
    Run(RunArgs),
    /// Print one pod's normalized signals as JSON, to debug what the router will see.
    Parse(ParseArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// The infergate.yaml that lists pools, pods and the scrape interval.
    #[arg(short, long, default_value = "infergate.yaml")]
    config: PathBuf,
    /// Control listener base URL of each gateway replica; repeat for several. Defaults
    /// to http://<gateway.control> from the config.
    #[arg(long = "control")]
    controls: Vec<String>,
    /// File holding the bearer token shared with Envoy.
    #[arg(long, conflicts_with = "token_env", required_unless_present = "token_env")]
    token_file: Option<PathBuf>,
    /// Environment variable holding the bearer token shared with Envoy.
    #[arg(long)]
    token_env: Option<String>,
    /// Timeout of one push to one gateway, milliseconds.
    #[arg(long, default_value_t = 1000)]
    push_timeout_ms: u64,
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
        Command::Run(args) => run(args).await,
        Command::Parse(args) => parse(args).await,
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
    let signals = engines::signals(args.engine.into(), &text).map_err(|e| e.to_string())?;
    let json = serde_json::to_string_pretty(&signals).map_err(|e| e.to_string())?;
    println!("{json}");
    Ok(())
}

async fn run(args: RunArgs) -> Result<(), String> {
    let config = InfergateConfig::from_yaml_file(&args.config).map_err(|e| e.to_string())?;
    let token = match (&args.token_file, &args.token_env) {
        (Some(path), _) => ControlToken::from_file(path)?,
        (None, Some(var)) => ControlToken::new(&std::env::var(var).unwrap_or_default())
            .ok_or_else(|| format!("the environment variable {var} is empty or unset"))?,
        (None, None) => return Err("give --token-file or --token-env".into()),
    };
    let controls =
        if args.controls.is_empty() { vec![format!("http://{}", config.gateway.control)] } else { args.controls };
    let client = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let interval = Duration::from_millis(config.agent.scrape_interval_ms);
    let pods: usize = config.pools.iter().map(|p| p.endpoints.len()).sum();
    let pusher = Pusher::new(client.clone(), controls, token, Duration::from_millis(args.push_timeout_ms));
    tracing::info!(pods, interval_ms = config.agent.scrape_interval_ms, targets = ?pusher.targets(), "metrics-agent started");
    let telemetry = Telemetry::new();
    let served = Arc::clone(&telemetry);
    let listen = args.listen;
    let server = tokio::spawn(async move {
        if let Err(e) = telemetry::serve(listen, served).await {
            tracing::error!(%listen, error = %e, "cannot serve /metrics, /healthz and /readyz");
        }
    });
    tracing::info!(listen = %args.listen, "serving /metrics, /healthz and /readyz");
    let mut scraper = FleetScraper::new(client, config);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut push_failing = vec![false; pusher.targets().len()];
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            _ = ticker.tick() => {}
        }
        let scrape_started = Instant::now();
        let snapshot = scraper.scrape().await;
        telemetry.scrape_seconds.observe(scrape_started.elapsed().as_secs_f64());
        for pod in scraper.failing_pods() {
            telemetry.scrape_errors.get_or_create(&PodLabel { pod: pod.to_string() }).inc();
        }
        telemetry.snapshots.inc();
        let bytes = match snapshot.encode() {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode the snapshot");
                continue;
            }
        };
        telemetry.snapshot_bytes.set(i64::try_from(bytes.len()).unwrap_or(i64::MAX));
        let push_started = Instant::now();
        let results = pusher.push(&bytes).await;
        telemetry.push_seconds.observe(push_started.elapsed().as_secs_f64());
        telemetry.set_ready(results.iter().all(Result::is_ok));
        for ((target, result), failing) in pusher.targets().iter().zip(results).zip(&mut push_failing) {
            if result.is_err() {
                telemetry.push_errors.get_or_create(&TargetLabel { target: target.clone() }).inc();
            }
            match result {
                Ok(()) if *failing => {
                    tracing::info!(%target, "push recovered");
                    *failing = false;
                }
                Ok(()) => {
                    tracing::debug!(%target, sequence = snapshot.sequence, bytes = bytes.len(), "pushed")
                }
                Err(e) if !*failing => {
                    tracing::warn!(%target, error = %e, "push failed; retrying every interval");
                    *failing = true;
                }
                Err(_) => {}
            }
        }
    }
    server.abort();
    tracing::info!("metrics-agent stopped");
    Ok(())
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
