//! `infergate-envoy-config`: renders the Envoy bootstrap from `infergate.yaml`.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use infergate_core::config::InfergateConfig;
use infergate_envoy_config::{DEFAULT_TOKEN_ENV, RenderOptions, UpstreamPolicy, WasmRuntime, render_bootstrap_yaml};

/// Render the Envoy bootstrap (listeners, the infergate Wasm filter in its three roles,
/// and one cluster per pool) from infergate.yaml. Validate the result with
/// `envoy --mode validate -c OUT`.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The infergate.yaml to render.
    #[arg(short, long, default_value = "infergate.yaml")]
    config: PathBuf,
    /// Path of the built filter, target/wasm32-wasip1/wasm/infergate_filter.wasm.
    #[arg(long)]
    wasm: PathBuf,
    /// Where to write the bootstrap; `-` for standard output.
    #[arg(short, long, default_value = "-")]
    out: PathBuf,
    /// The Wasm runtime Envoy runs the filter in.
    #[arg(long, value_enum, default_value_t = WasmRuntime::V8)]
    runtime: WasmRuntime,
    /// The environment variable of the Envoy process that holds the control token.
    #[arg(long, default_value = DEFAULT_TOKEN_ENV)]
    token_env: String,
    /// How clusters pick pods: infergate, or one of Envoy's policies as a baseline.
    #[arg(long, value_enum, default_value_t = UpstreamPolicy::Infergate)]
    upstream_policy: UpstreamPolicy,
    /// Add an `x-infergate-decision` response header explaining each choice.
    #[arg(long)]
    explain: bool,
    /// Do not write an access log line per request.
    #[arg(long)]
    no_access_log: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match InfergateConfig::from_yaml_file(&args.config) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    let wasm = std::path::absolute(&args.wasm).unwrap_or(args.wasm);
    let options = RenderOptions {
        runtime: args.runtime,
        token_env: args.token_env,
        upstream_policy: args.upstream_policy,
        explain: args.explain,
        access_log: !args.no_access_log,
        ..RenderOptions::new(wasm)
    };
    let text = match render_bootstrap_yaml(&config, &options) {
        Ok(text) => text,
        Err(err) => {
            eprintln!("error: cannot render: {err}");
            return ExitCode::FAILURE;
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
