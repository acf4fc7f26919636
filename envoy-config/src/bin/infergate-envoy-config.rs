//! `infergate-envoy-config`: renders the gateway's configuration from `infergate.yaml`,
//! for plain Envoy or as Kubernetes manifests for Envoy Gateway or Istio.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use infergate_core::config::InfergateConfig;
use infergate_core::global::GlobalRouterConfig;
use infergate_envoy_config::kubernetes::{self, GatewayRef, KubernetesOptions, WasmSource};
use infergate_envoy_config::{
    DEFAULT_TOKEN_ENV, RenderOptions, UpstreamPolicy, WasmRuntime, render_bootstrap_yaml, render_global_bootstrap_yaml,
};
use sha2::{Digest, Sha256};

/// What to render.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Target {
    /// An Envoy bootstrap: listeners, the filter in its three roles, one cluster per pool.
    Envoy,
    /// Services, an HTTPRoute, and Envoy Gateway's EnvoyExtensionPolicy, EnvoyPatchPolicy
    /// and EnvoyProxy.
    EnvoyGateway,
    /// Services, an HTTPRoute and an Istio EnvoyFilter, for a Gateway of class istio.
    Istio,
    /// The InferencePool-native deployment, for any gateway that implements the
    /// Inference Extension: infergate-epp as the endpoint picker, an InferencePool per
    /// pool, and an HTTPRoute to them. No Wasm.
    InferencePool,
    /// Tier 2: the global router's bootstrap, from an infergate-global.yaml.
    Global,
}

/// Render the gateway's configuration from infergate.yaml.
///
/// For plain Envoy (the default), the bootstrap; validate it with
/// `envoy --mode validate -c OUT`. For the global router (tier 2), its bootstrap from an
/// infergate-global.yaml. For Envoy Gateway or Istio, the manifests to
/// `kubectl apply`; docs/deploy.md says what each one does.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The infergate.yaml to render.
    #[arg(short, long, default_value = "infergate.yaml")]
    config: PathBuf,
    /// What to render.
    #[arg(long, value_enum, default_value_t = Target::Envoy)]
    target: Target,
    /// The built filter, target/wasm32-wasip1/wasm/infergate_filter.wasm. Envoy loads it
    /// from this path; for Kubernetes, its SHA-256 is computed from it.
    #[arg(long)]
    wasm: Option<PathBuf>,
    /// Where to write; `-` for standard output.
    #[arg(short, long, default_value = "-")]
    out: PathBuf,
    /// The Wasm runtime Envoy runs the filter in.
    #[arg(long, value_enum, default_value_t = WasmRuntime::V8)]
    runtime: WasmRuntime,
    /// The environment variable of the Envoy process that holds the control token.
    #[arg(long, default_value = DEFAULT_TOKEN_ENV)]
    token_env: String,
    /// How clusters pick pods: infergate, or one of Envoy's policies as a baseline (Envoy only).
    #[arg(long, value_enum, default_value_t = UpstreamPolicy::Infergate)]
    upstream_policy: UpstreamPolicy,
    /// Add an `x-infergate-decision` response header explaining each choice (Envoy only).
    #[arg(long)]
    explain: bool,
    /// Do not write an access log line per request (Envoy only).
    #[arg(long)]
    no_access_log: bool,
    /// Route through `infergate-epp` listening (gRPC) at this address, with Envoy's
    /// ext_proc filter, instead of loading the filter (Envoy only; no --wasm needed).
    /// Repeat it for active-active pickers: Envoy health-checks them and a request
    /// whose picker fails goes to another (docs/epp.md). Point the agent's --control at
    /// every picker's control address.
    #[arg(long, value_name = "ADDRESS", conflicts_with = "wasm")]
    ext_proc: Vec<std::net::SocketAddr>,

    /// Kubernetes: the Gateway that carries the OpenAI endpoint, as NAMESPACE/NAME.
    #[arg(long, default_value = "infergate-system/infergate", help_heading = "Kubernetes")]
    gateway: String,
    /// Kubernetes: the `sectionName` of the Gateway's listener for clients.
    #[arg(long, default_value = "http", help_heading = "Kubernetes")]
    gateway_listener: String,
    /// Kubernetes: the port of that listener.
    #[arg(long, default_value_t = 80, help_heading = "Kubernetes")]
    gateway_port: u16,
    /// Kubernetes: where the platform runs the gateway's Envoy pods (default:
    /// envoy-gateway-system for Envoy Gateway, the Gateway's namespace for Istio). The
    /// control Service, its NetworkPolicy and the token's Secret go there.
    #[arg(long, help_heading = "Kubernetes")]
    gateway_pods_namespace: Option<String>,
    /// Kubernetes: namespace of the pools' Services and the HTTPRoute (default: the
    /// pools' own, which must be one).
    #[arg(long, help_heading = "Kubernetes")]
    namespace: Option<String>,
    /// Kubernetes: the http(s) URL the gateway fetches the module from.
    #[arg(long, help_heading = "Kubernetes")]
    wasm_url: Option<String>,
    /// Kubernetes: the module's SHA-256 (default: computed from --wasm).
    #[arg(long, help_heading = "Kubernetes")]
    wasm_sha256: Option<String>,
    /// Envoy Gateway: load the router from this OCI image instead of --wasm-url.
    #[arg(long, help_heading = "Kubernetes")]
    wasm_image: Option<String>,
    /// InferencePool: the infergate-epp container image (deploy/docker/epp.Dockerfile).
    #[arg(long, default_value = "infergate/epp:0.1.0", help_heading = "Kubernetes")]
    epp_image: String,
    /// Kubernetes: the Secret, in the gateway pods' namespace, whose `token` key is the
    /// control token.
    #[arg(long, default_value = "infergate-control-token", help_heading = "Kubernetes")]
    token_secret: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let text = match args.target {
        Target::Global => global_bootstrap(&args),
        target => match InfergateConfig::from_yaml_file(&args.config) {
            Ok(config) if target == Target::Envoy => envoy_bootstrap(&args, &config),
            Ok(config) if target == Target::InferencePool => inference_pool_manifests(&args, &config),
            Ok(config) => kubernetes_manifests(&args, &config),
            Err(err) => Err(err.to_string()),
        },
    };
    let text = match text {
        Ok(text) => text,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    let written = if args.out.as_os_str() == "-" {
        print!("{text}");
        Ok(())
    } else {
        std::fs::write(&args.out, text)
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: cannot write {}: {err}", args.out.display());
            ExitCode::FAILURE
        }
    }
}

fn render_options(args: &Args) -> Result<RenderOptions, String> {
    let base = match args.ext_proc.as_slice() {
        [_, ..] => RenderOptions::ext_proc(args.ext_proc.clone()),
        [] => {
            let wasm = args.wasm.clone().ok_or("--wasm is required: Envoy loads the filter from that path")?;
            RenderOptions::new(std::path::absolute(&wasm).unwrap_or(wasm))
        }
    };
    Ok(RenderOptions {
        runtime: args.runtime,
        token_env: args.token_env.clone(),
        upstream_policy: args.upstream_policy,
        explain: args.explain,
        access_log: !args.no_access_log,
        ..base
    })
}

fn envoy_bootstrap(args: &Args, config: &InfergateConfig) -> Result<String, String> {
    render_bootstrap_yaml(config, &render_options(args)?).map_err(|e| format!("cannot render: {e}"))
}

fn global_bootstrap(args: &Args) -> Result<String, String> {
    let config = GlobalRouterConfig::from_yaml_file(&args.config).map_err(|e| e.to_string())?;
    render_global_bootstrap_yaml(&config, &render_options(args)?).map_err(|e| format!("cannot render: {e}"))
}

/// The options every Kubernetes target shares, with where the module comes from.
fn kubernetes_options(args: &Args, config: &InfergateConfig, wasm: WasmSource) -> Result<KubernetesOptions, String> {
    let (gateway_namespace, gateway_name) =
        args.gateway.split_once('/').ok_or_else(|| format!("--gateway {:?}: expected NAMESPACE/NAME", args.gateway))?;
    let gateway = GatewayRef {
        namespace: gateway_namespace.to_string(),
        name: gateway_name.to_string(),
        listener: args.gateway_listener.clone(),
        port: args.gateway_port,
        pods_namespace: match (&args.gateway_pods_namespace, args.target) {
            (Some(namespace), _) => namespace.clone(),
            (None, Target::Istio | Target::InferencePool) => gateway_namespace.to_string(),
            (None, _) => "envoy-gateway-system".to_string(),
        },
    };
    let mut options = KubernetesOptions::new(gateway, wasm);
    options.namespace = match &args.namespace {
        Some(namespace) => namespace.clone(),
        None => pools_namespace(config).unwrap_or_else(|| options.gateway.namespace.clone()),
    };
    options.runtime = args.runtime;
    options.token_env = args.token_env.clone();
    options.token_secret = args.token_secret.clone();
    Ok(options)
}

fn inference_pool_manifests(args: &Args, config: &InfergateConfig) -> Result<String, String> {
    // The gateway loads no module: the picker is a container.
    let no_wasm = WasmSource { url: String::new(), sha256: String::new(), image: None };
    let options = kubernetes_options(args, config, no_wasm)?;
    let documents = kubernetes::inference_pool::render(config, &options, &args.epp_image).map_err(|e| e.to_string())?;
    kubernetes::to_yaml_documents(
        &format!(
            "Rendered by infergate-envoy-config --target inference-pool from infergate.yaml; edit that file, not this one.\n# \
             Run the metrics agent with --control-service {}/{}: it pushes to every picker.",
            options.namespace,
            kubernetes::inference_pool::PICKER_CONTROL
        ),
        &documents,
    )
}

fn kubernetes_manifests(args: &Args, config: &InfergateConfig) -> Result<String, String> {
    let url = args.wasm_url.clone().ok_or("--wasm-url is required: the gateway fetches the module from it")?;
    let sha256 = match (&args.wasm_sha256, &args.wasm) {
        (Some(sha256), _) => sha256.clone(),
        (None, Some(path)) => {
            let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            format!("{:x}", Sha256::digest(bytes))
        }
        (None, None) => return Err("pass --wasm-sha256, or --wasm to compute it".to_string()),
    };
    let options = kubernetes_options(args, config, WasmSource { url, sha256, image: args.wasm_image.clone() })?;
    let (documents, platform) = match args.target {
        Target::Istio => (kubernetes::istio::render(config, &options), "Istio"),
        _ => (kubernetes::envoy_gateway::render(config, &options), "Envoy Gateway"),
    };
    let documents = documents.map_err(|e| e.to_string())?;
    kubernetes::to_yaml_documents(
        &format!(
            "Rendered by infergate-envoy-config --target for {platform} from infergate.yaml; edit that file, not this one."
        ),
        &documents,
    )
}

/// The namespace of the first pool discovered by pod selector.
fn pools_namespace(config: &InfergateConfig) -> Option<String> {
    config.pools.iter().find_map(|pool| pool.discovery.as_ref()?.pods.as_ref().map(|s| s.namespace.clone()))
}
