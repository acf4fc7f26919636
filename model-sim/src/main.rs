//! `model-sim`: serve a fleet of simulated vLLM-style pods from one process.
#![forbid(unsafe_code)]

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use infergate_model_sim::engine::EngineProfile;
use infergate_model_sim::fleet::{Pod, PodSpec, serve};
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// Serve N simulated OpenAI-compatible model servers on ports P..P+N-1. Each answers
/// /v1/chat/completions, /v1/completions (streaming or not), /v1/models and /metrics
/// (vLLM V1 names), names itself in `x-infergate-served-by`, and has an admin API:
/// POST /admin/metrics pins reported metrics (JSON: waiting, running, kv_cache_usage,
/// running_lora_adapters, waiting_lora_adapters), DELETE /admin/metrics unpins, and
/// POST /admin/shutdown kills the pod (its port then refuses connections).
#[derive(Parser)]
#[command(version)]
struct Args {
    /// How many pods to serve.
    #[arg(long, default_value_t = 4)]
    pods: u16,
    /// Port of the first pod; the others follow.
    #[arg(long, default_value_t = 8001)]
    base_port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Model names the pods accept (comma-separated); empty accepts any.
    #[arg(long, value_delimiter = ',')]
    models: Vec<String>,
    /// Batch slots per pod (vLLM --max-num-seqs).
    #[arg(long, default_value_t = 16)]
    max_num_seqs: u32,
    /// Prefill speed, prompt tokens per second.
    #[arg(long, default_value_t = 8000.0)]
    prefill_tokens_per_s: f64,
    /// Decode step time with an empty batch, milliseconds.
    #[arg(long, default_value_t = 20.0)]
    itl_base_ms: f64,
    /// Added decode step time per running request, milliseconds.
    #[arg(long, default_value_t = 1.0)]
    itl_per_seq_ms: f64,
    /// KV-cache capacity per pod, tokens.
    #[arg(long, default_value_t = 80_000)]
    kv_capacity_tokens: u64,
    /// Reported LoRA slots (vLLM --max-loras).
    #[arg(long, default_value_t = 4)]
    max_loras: u32,
    /// Scale every simulated duration: 0.1 runs ten times faster than real time.
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let profile = EngineProfile {
        max_num_seqs: args.max_num_seqs.max(1),
        prefill_tokens_per_s: args.prefill_tokens_per_s.max(1.0),
        itl_base_ms: args.itl_base_ms.max(0.0),
        itl_per_seq_ms: args.itl_per_seq_ms.max(0.0),
        kv_capacity_tokens: args.kv_capacity_tokens.max(1),
        time_scale: args.time_scale.max(0.0),
        ..EngineProfile::default()
    };
    let stop = Arc::new(Notify::new());
    let mut servers = Vec::new();
    for i in 0..args.pods {
        let Some(port) = args.base_port.checked_add(i) else {
            eprintln!("error: port {} + {i} is out of range", args.base_port);
            return ExitCode::from(2);
        };
        let address = SocketAddr::new(args.host, port);
        let listener = match TcpListener::bind(address).await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("error: cannot bind pod {i} on {address}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let pod = Pod::new(PodSpec {
            address,
            profile,
            models: args.models.clone(),
            max_loras: args.max_loras,
        });
        servers.push(tokio::spawn(serve(pod, listener, Arc::clone(&stop))));
    }
    tracing::info!(
        pods = args.pods,
        first_port = args.base_port,
        time_scale = args.time_scale,
        "model-sim fleet serving"
    );
    wait_for_signal().await;
    tracing::info!("stopping the fleet");
    stop.notify_waiters();
    for server in servers {
        let _ = server.await;
    }
    ExitCode::SUCCESS
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
