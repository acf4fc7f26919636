//! `infergate-epp`: see the crate documentation.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use infergate_core::config::InfergateConfig;
use infergate_epp::control::{self, ControlState};
use infergate_epp::picker::{Picker, PickerSettings};
use infergate_epp::service;
use prometheus_client::registry::Registry;

/// Route inference requests for a gateway that calls an endpoint picker over Envoy's
/// ext_proc (the Gateway API Inference Extension's protocol: Istio, agentgateway,
/// kgateway, NGINX Gateway Fabric, GKE, or plain Envoy with the ext_proc filter).
///
/// The picker runs infergate's router on the snapshots the metrics agent pushes to it:
/// point the agent's `--control` at this process's control address. Envoy must send
/// the request body `FULL_DUPLEX_STREAMED` (with request trailers `SEND`) and the
/// response headers; `infergate-envoy-config --ext-proc` renders such a bootstrap.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The infergate.yaml whose pools, models and routing settings the picker starts
    /// with; each snapshot then carries the agent's current config.
    #[arg(short, long, default_value = "infergate.yaml")]
    config: PathBuf,
    /// Where Envoy's ext_proc filter connects (gRPC, HTTP/2); the gRPC health service
    /// answers on the same port.
    #[arg(long, default_value = "127.0.0.1:9002")]
    listen: SocketAddr,
    /// Where the agent pushes snapshots, and where `/metrics`, `/healthz` and
    /// `/readyz` answer. Defaults to `gateway.control` from the config.
    #[arg(long)]
    control: Option<SocketAddr>,
    /// File holding the bearer token the agent pushes with.
    #[arg(long, conflicts_with = "token_env", required_unless_present = "token_env")]
    token_file: Option<PathBuf>,
    /// Environment variable holding that token.
    #[arg(long)]
    token_env: Option<String>,
    /// Add `x-infergate-decision` (pool, basis, ranked pods, predicted TTFT) to the
    /// request headers sent to the pod.
    #[arg(long)]
    explain: bool,
    /// On SIGTERM or Ctrl-C, first stop taking new streams (gRPC health
    /// `infergate.epp.streams` and readiness turn NOT_SERVING) and wait this long for
    /// the gateway's health checks to see it; then stop accepting connections and
    /// serve the open streams to their end. With several pickers, Envoy checks every
    /// second: keep it above that, so that no request goes to a picker that is gone.
    #[arg(long, default_value_t = 3000, value_name = "MS")]
    drain_ms: u64,
}

/// How often the health services follow the picker's state.
const HEALTH_POLL_MS: u64 = 200;

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

fn read_token(args: &Args) -> Result<String, String> {
    let token = match (&args.token_file, &args.token_env) {
        (Some(path), _) => std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?,
        (None, Some(var)) => std::env::var(var).map_err(|_| format!("the environment variable {var} is unset"))?,
        (None, None) => return Err("give --token-file or --token-env".into()),
    };
    let token = token.trim().to_string();
    if token.is_empty() {
        return Err("the token is empty".into());
    }
    Ok(token)
}

async fn run(args: Args) -> Result<(), String> {
    let config = InfergateConfig::from_yaml_file(&args.config).map_err(|e| e.to_string())?;
    let token = read_token(&args)?;
    let settings = PickerSettings {
        max_body_bytes: config.gateway.max_body_bytes,
        early_decision: config.gateway.early_decision,
        explain: args.explain,
    };
    if config.flow_control.enabled {
        tracing::warn!(
            "flow_control is enabled but the picker has no gateway queue: requests are routed or shed at once"
        );
    }
    let seed = u64::from(std::process::id()) ^ infergate_epp::picker::now_ms();
    let picker = Arc::new(Picker::new(config.routing_config(), settings, seed));
    let mut registry = Registry::default();
    picker.stats.register(&mut registry);
    let control_addr = args.control.unwrap_or(config.gateway.control);
    let control_listener = tokio::net::TcpListener::bind(control_addr)
        .await
        .map_err(|e| format!("cannot listen on {control_addr} (control): {e}"))?;
    let control_app = control::router(Arc::new(ControlState { picker: Arc::clone(&picker), token, registry }));

    let (reporter, health) = tonic_health::server::health_reporter();
    service::report_health(&reporter, false).await;
    service::report_streams(&reporter, true).await;
    let watched = Arc::clone(&picker);
    tokio::spawn(async move {
        let (mut was_ready, mut was_accepting) = (false, true);
        loop {
            let ready = watched.ready();
            if ready != was_ready {
                service::report_health(&reporter, ready).await;
                tracing::info!(ready, "readiness changed");
                was_ready = ready;
            }
            let accepting = watched.accepting();
            if accepting != was_accepting {
                service::report_streams(&reporter, accepting).await;
                was_accepting = accepting;
            }
            tokio::time::sleep(Duration::from_millis(HEALTH_POLL_MS)).await;
        }
    });

    // Told to stop: drain first, then both servers stop (the gRPC one after its open
    // streams end).
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let draining = Arc::clone(&picker);
    let drain_ms = args.drain_ms;
    tokio::spawn(async move {
        shutdown_signal().await;
        draining.drain();
        tracing::info!(drain_ms, "draining: no new streams; the open ones are served to their end");
        tokio::time::sleep(Duration::from_millis(drain_ms + HEALTH_POLL_MS)).await;
        let _ = stop.send(true);
    });
    let stop_signal = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };

    tracing::info!(ext_proc = %args.listen, control = %control_addr, early_decision = settings.early_decision, "infergate-epp serving");
    let control_server =
        axum::serve(control_listener, control_app).with_graceful_shutdown(stop_signal(stopped.clone()));
    let grpc_server = tonic::transport::Server::builder()
        .add_service(health)
        .add_service(service::ext_proc_server(Arc::clone(&picker)))
        .serve_with_shutdown(args.listen, stop_signal(stopped));
    let (control, grpc) = tokio::join!(control_server, grpc_server);
    control.map_err(|e| format!("control server: {e}"))?;
    grpc.map_err(|e| format!("gRPC server on {}: {e}", args.listen))?;
    tracing::info!("infergate-epp stopped");
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
