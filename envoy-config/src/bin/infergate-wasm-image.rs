//! `infergate-wasm-image`: packs the filter's `.wasm` as an OCI artifact (an image
//! layout directory) for Istio's `WasmPlugin` and Envoy Gateway's `EnvoyExtensionPolicy`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use infergate_envoy_config::wasm_image;

/// Writes an OCI image layout holding the filter: a wasm config blob and one layer that
/// is the `.wasm`, byte for byte. Push it with, for example,
/// `oras cp --from-oci-layout DIR:TAG registry.example.com/infergate/filter:TAG` or
/// `skopeo copy oci:DIR:TAG docker://registry.example.com/infergate/filter:TAG`.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The built filter, target/wasm32-wasip1/wasm/infergate_filter.wasm.
    #[arg(long)]
    wasm: PathBuf,
    /// The layout directory to write (created if missing).
    #[arg(long, default_value = "target/oci/infergate-filter")]
    out: PathBuf,
    /// The tag recorded in the layout's index.
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
    tag: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let wasm = match std::fs::read(&args.wasm) {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!("error: {}: {e} (build it with `make wasm`)", args.wasm.display());
            return ExitCode::from(2);
        }
    };
    match wasm_image::write_layout(&wasm, &args.tag, &args.out) {
        Ok(digest) => {
            println!("{} {}:{} layer {}", digest, args.out.display(), args.tag, wasm_image::sha256_digest(&wasm));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
