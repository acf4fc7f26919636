//! `model-sim`: serve a fleet of simulated vLLM-style pods from one process.
#![forbid(unsafe_code)]

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use infergate_model_sim::engine::{EngineProfile, NamedProfile};
use infergate_model_sim::server::faults::Faults;
use infergate_model_sim::server::{KvRole, MetricsFormat, PdSettings, Pod, PodSpec, serve};
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// Serve N simulated OpenAI-compatible model servers on ports P..P+N-1. Each runs a
/// continuous-batching engine model (see docs/model-sim.md) and answers
/// /v1/chat/completions and /v1/completions (streaming or not), /v1/models and /metrics
/// in the chosen engine's names. Every response names its pod in x-infergate-served-by.
///
/// Admin API per pod: POST /admin/metrics pins reported metrics (JSON: waiting, running,
/// kv_cache_usage, running_lora_adapters, waiting_lora_adapters), DELETE /admin/metrics
/// unpins; POST /admin/faults sets faults (added_latency_ms, error_rate, error_status,
/// hang, freeze_metrics); POST /admin/shutdown kills the pod (streams in progress are cut,
/// and its port then refuses connections).
///
/// Prefill/decode disaggregation as vLLM's NixlConnector does it: a request with
/// kv_transfer_params.do_remote_decode is a prefill leg, answered with the
/// kv_transfer_params a decode leg (do_remote_prefill) carries to another pod, which
/// fetches the prompt's KV from this one (POST /internal/kv/claim) and waits for the
/// transfer. See docs/model-sim.md.
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
    /// Model names that are LoRA adapters (comma-separated): they take an adapter slot.
    #[arg(long, value_delimiter = ',')]
    lora_adapters: Vec<String>,
    /// The calibration every pod starts from; the flags below override it.
    #[arg(long, value_enum, default_value_t = NamedProfile::Llama31_8bH100)]
    profile: NamedProfile,
    /// Batch slots per pod (vLLM --max-num-seqs).
    #[arg(long)]
    max_num_seqs: Option<u32>,
    /// Prefill speed, prompt tokens per second.
    #[arg(long)]
    prefill_tokens_per_s: Option<f64>,
    /// Decode step time with a batch of one, milliseconds.
    #[arg(long)]
    itl_base_ms: Option<f64>,
    /// Added decode step time per running request, milliseconds.
    #[arg(long)]
    itl_per_seq_ms: Option<f64>,
    /// KV-cache blocks per pod.
    #[arg(long)]
    num_gpu_blocks: Option<u64>,
    /// LoRA slots per pod (vLLM --max-loras).
    #[arg(long)]
    max_loras: Option<u32>,
    /// Adapter load time, milliseconds.
    #[arg(long)]
    lora_load_ms: Option<f64>,
    /// Per-pod overrides, `INDEX:KEY=VALUE[,KEY=VALUE]`, e.g. `0:prefill_tokens_per_s=5000`
    /// for one slow pod, or `3:num_gpu_blocks=2000` for one with less KV. Repeatable.
    /// KEY is a profile field, or kv_role, kv_bytes_per_token, kv_transfer_gb_per_s or
    /// pd_sidecar (true or false), e.g. `0:kv_role=producer`.
    #[arg(long = "pod-override")]
    pod_overrides: Vec<String>,
    /// Which engine's metric names /metrics uses.
    #[arg(long, value_enum, default_value_t = MetricsFormat::Vllm)]
    engine: MetricsFormat,
    /// Data-parallel ranks reported as engine="0".."N-1" series (vLLM formats).
    #[arg(long, default_value_t = 1)]
    dp_size: u32,
    /// Scale every simulated duration: 0.1 runs ten times faster than real time, 10 ten
    /// times slower. The latencies /metrics reports are scaled alike, as a real pod of
    /// that speed would report them.
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Added latency before each request reaches the engine, milliseconds.
    #[arg(long, default_value_t = 0)]
    fault_latency_ms: u64,
    /// Fraction of requests answered with --fault-status.
    #[arg(long, default_value_t = 0.0)]
    fault_error_rate: f64,
    /// The injected error status: 429, 500 or 503.
    #[arg(long, default_value_t = 503)]
    fault_status: u16,
    /// Seed for the injected faults.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The pods' part in prefill/decode disaggregation (vLLM's kv_role): producer
    /// refuses decode legs, consumer refuses prefill legs, both serves either. Every
    /// role serves plain requests.
    #[arg(long, value_enum, default_value_t = KvRole::Both)]
    kv_role: KvRole,
    /// KV-cache bytes per prompt token a transfer moves (Llama-3.1-8B in BF16: 131072).
    #[arg(long, default_value_t = 131_072)]
    kv_bytes_per_token: u64,
    /// Bandwidth of each pod's inbound KV link, 10^9 bytes per simulated second;
    /// transfers on one pod's link run one after another.
    #[arg(long, default_value_t = 25.0)]
    kv_transfer_gb_per_s: f64,
    /// Simulated seconds a prefill pod holds a prompt's KV for its decode pod (vLLM's
    /// VLLM_NIXL_ABORT_REQUEST_TIMEOUT).
    #[arg(long, default_value_t = 480.0)]
    kv_lease_s: f64,
    /// The host a prefill leg's answer tells the decode pod to fetch the KV from
    /// (vLLM's VLLM_NIXL_SIDE_CHANNEL_HOST); default: --host, or 127.0.0.1 when that is
    /// unspecified (0.0.0.0).
    #[arg(long)]
    kv_host: Option<String>,
    /// Emulate llm-d's routing sidecar in front of each pod: a request with
    /// x-prefiller-host-port has its prefill leg sent to that pod first, then is
    /// decoded here.
    #[arg(long)]
    pd_sidecar: bool,
}

impl Args {
    fn base_profile(&self) -> EngineProfile {
        let mut p = self.profile.profile();
        if let Some(v) = self.max_num_seqs {
            p.max_num_seqs = v.max(1);
        }
        if let Some(v) = self.prefill_tokens_per_s {
            p.prefill_tokens_per_s = v.max(1.0);
        }
        if let Some(v) = self.itl_base_ms {
            p.itl_base_ms = v.max(0.0);
        }
        if let Some(v) = self.itl_per_seq_ms {
            p.itl_per_seq_ms = v.max(0.0);
        }
        if let Some(v) = self.num_gpu_blocks {
            p.num_gpu_blocks = v.max(1);
        }
        if let Some(v) = self.max_loras {
            p.max_loras = v;
        }
        if let Some(v) = self.lora_load_ms {
            p.lora_load_ms = v.max(0.0);
        }
        p
    }

    fn pd_settings(&self) -> PdSettings {
        PdSettings {
            role: self.kv_role,
            kv_bytes_per_token: self.kv_bytes_per_token,
            transfer_gb_per_s: self.kv_transfer_gb_per_s,
            lease_s: self.kv_lease_s,
            sidecar: self.pd_sidecar,
            kv_host: self.kv_host.clone(),
        }
    }
}

/// One pod's engine profile and P/D settings.
#[derive(Clone)]
struct PodConfig {
    profile: EngineProfile,
    pd: PdSettings,
}

/// Applies `KEY=VALUE,...` to a pod: P/D settings by name, profile fields through
/// their serde names.
fn apply_override(pod: &mut PodConfig, assignments: &str) -> Result<(), String> {
    let mut value = serde_json::to_value(pod.profile).map_err(|e| e.to_string())?;
    for assignment in assignments.split(',') {
        let (key, raw) = assignment.split_once('=').ok_or_else(|| format!("expected KEY=VALUE, got {assignment:?}"))?;
        if let Some(result) = pod.pd.set(key, raw) {
            result?;
            continue;
        }
        let number: serde_json::Value = raw
            .parse::<u64>()
            .map(serde_json::Value::from)
            .or_else(|_| raw.parse::<f64>().map(serde_json::Value::from))
            .map_err(|_| format!("{key}: {raw:?} is not a number"))?;
        let slot = value.get_mut(key).ok_or_else(|| format!("unknown profile field {key:?}"))?;
        *slot = number;
    }
    pod.profile = serde_json::from_value(value).map_err(|e| e.to_string())?;
    pod.pd.validate()
}

fn pod_configs(args: &Args) -> Result<Vec<PodConfig>, String> {
    let base = PodConfig { profile: args.base_profile(), pd: args.pd_settings() };
    base.pd.validate()?;
    let mut pods = vec![base; usize::from(args.pods)];
    for spec in &args.pod_overrides {
        let (index, assignments) =
            spec.split_once(':').ok_or_else(|| format!("--pod-override {spec:?}: expected INDEX:KEY=VALUE"))?;
        let index: usize = index.parse().map_err(|_| format!("--pod-override {spec:?}: bad index"))?;
        let slot =
            pods.get_mut(index).ok_or_else(|| format!("--pod-override {spec:?}: there are only {} pods", args.pods))?;
        apply_override(slot, assignments).map_err(|e| format!("--pod-override {spec:?}: {e}"))?;
    }
    Ok(pods)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let args = Args::parse();
    let faults = Faults {
        added_latency_ms: args.fault_latency_ms,
        error_rate: args.fault_error_rate,
        error_status: args.fault_status,
        ..Faults::default()
    };
    let checked = faults.validate().and_then(|()| pod_configs(&args));
    let pods = match checked {
        Ok(pods) => pods,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let stop = Arc::new(Notify::new());
    let mut servers = Vec::new();
    for (i, config) in (0u16..).zip(pods) {
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
            models: args.models.clone(),
            adapters: args.lora_adapters.clone(),
            time_scale: args.time_scale.max(1e-6),
            metrics_format: args.engine,
            dp_size: args.dp_size.max(1),
            faults: faults.clone(),
            seed: args.seed,
            pd: config.pd,
            ..PodSpec::new(address, config.profile)
        });
        servers.push(tokio::spawn(serve(pod, listener, Arc::clone(&stop))));
    }
    tracing::info!(pods = args.pods, first_port = args.base_port, time_scale = args.time_scale, engine = ?args.engine, kv_role = ?args.kv_role, pd_sidecar = args.pd_sidecar, "model-sim fleet serving");
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
