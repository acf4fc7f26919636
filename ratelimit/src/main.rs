//! `infergate-ratelimit`: Envoy's gRPC rate limit API for the global router, counted in
//! Redis so that replicas share their counts.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use infergate_core::global::GlobalRouterConfig;
use infergate_ratelimit::counter::Counter;
use infergate_ratelimit::service::Limiter;
use infergate_ratelimit::usage::{self, UsageState};

/// Serve the global router's rate limits: requests and tokens per minute, per tenant
/// and model, from the `rate_limits` section of infergate-global.yaml. Run several
/// replicas on one Redis; they share the counts.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The global router's config; its `rate_limits` section is read.
    #[arg(short, long, default_value = "infergate-global.yaml")]
    config: PathBuf,
    /// Serve the gRPC API here instead of `rate_limits.service`.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Serve `POST /v1/usage` here instead of `rate_limits.usage`.
    #[arg(long)]
    usage_listen: Option<SocketAddr>,
    /// File holding the bearer token the global router's filter sends with usage.
    #[arg(long, conflicts_with = "token_env", required_unless_present = "token_env")]
    token_file: Option<PathBuf>,
    /// Environment variable holding that token.
    #[arg(long)]
    token_env: Option<String>,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let config = GlobalRouterConfig::from_yaml_file(&args.config).map_err(|e| e.to_string())?;
    let limits = config.rate_limits.ok_or_else(|| format!("{}: no rate_limits section", args.config.display()))?;
    let token = match (&args.token_file, &args.token_env) {
        (Some(path), _) => std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?,
        (None, Some(var)) => std::env::var(var).map_err(|_| format!("the environment variable {var} is unset"))?,
        (None, None) => return Err("give --token-file or --token-env".into()),
    };
    let token = token.trim().to_string();
    if token.is_empty() {
        return Err("the token is empty".into());
    }
    let grpc_addr = args.listen.unwrap_or(limits.service.socket_addr());
    let usage_addr = args.usage_listen.unwrap_or(limits.usage.socket_addr());
    let counter =
        Counter::connect(&limits.redis).await.map_err(|e| format!("cannot connect to {}: {e}", limits.redis))?;
    let limiter = Arc::new(Limiter { limits, counter });
    let usage_listener =
        tokio::net::TcpListener::bind(usage_addr).await.map_err(|e| format!("cannot listen on {usage_addr}: {e}"))?;
    let usage_app = usage::router(Arc::new(UsageState { limiter: Arc::clone(&limiter), token }));
    tracing::info!(grpc = %grpc_addr, usage = %usage_addr, "infergate-ratelimit serving");
    let usage_server = axum::serve(usage_listener, usage_app).with_graceful_shutdown(shutdown_signal());
    let grpc_server = tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::from_arc(limiter))
        .serve_with_shutdown(grpc_addr, shutdown_signal());
    let (usage, grpc) = tokio::join!(usage_server, grpc_server);
    usage.map_err(|e| format!("usage server: {e}"))?;
    grpc.map_err(|e| format!("gRPC server: {e}"))?;
    tracing::info!("infergate-ratelimit stopped");
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
