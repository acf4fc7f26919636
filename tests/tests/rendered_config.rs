//! Every bootstrap we render passes Envoy's own validation.

use std::process::Command;

use infergate_core::config::InfergateConfig;
use infergate_e2e::artifacts;
use infergate_envoy_config::{RenderOptions, UpstreamPolicy, WasmRuntime, render_bootstrap_yaml};

fn validate(options: &RenderOptions) {
    let root = artifacts::workspace_root();
    let config = InfergateConfig::from_yaml_file(&root.join("examples/infergate.yaml")).expect("the example config");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("envoy.yaml");
    std::fs::write(&path, render_bootstrap_yaml(&config, options).unwrap()).unwrap();
    let output = Command::new(artifacts::envoy())
        .args(["--mode", "validate", "--disable-hot-restart", "-c"])
        .arg(&path)
        .env("INFERGATE_CONTROL_TOKEN", "validate-token")
        .output()
        .expect("run envoy --mode validate");
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "envoy rejected the config for {options:?}:\n{log}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("OK") || log.contains("OK"));
}

// The PyPI build of Envoy 1.40 has only the V8 runtime compiled in: wasmtime and WAMR
// are rejected with "Envoy was compiled without support for it", so only V8 is checked.
#[test]
fn the_example_bootstrap_validates_with_the_filter_and_with_each_baseline() {
    let wasm = artifacts::filter_wasm();
    validate(&RenderOptions { runtime: WasmRuntime::V8, ..RenderOptions::new(wasm.clone()) });
    for upstream_policy in [UpstreamPolicy::RoundRobin, UpstreamPolicy::LeastRequest, UpstreamPolicy::Random] {
        validate(&RenderOptions { upstream_policy, ..RenderOptions::new(wasm.clone()) });
    }
}

#[test]
fn the_filter_refuses_an_invalid_plugin_configuration() {
    let root = artifacts::workspace_root();
    let config = InfergateConfig::from_yaml_file(&root.join("examples/infergate.yaml")).unwrap();
    let mut text = render_bootstrap_yaml(&config, &RenderOptions::new(artifacts::filter_wasm())).unwrap();
    // A router role whose model points at a pool that does not exist.
    text = text.replacen(r#""pool":"qwen""#, r#""pool":"missing""#, 1);
    assert!(text.contains("missing"), "the test edit did not apply");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("envoy.yaml");
    std::fs::write(&path, text).unwrap();
    let output = Command::new(artifacts::envoy())
        .args(["--mode", "validate", "--disable-hot-restart", "-c"])
        .arg(&path)
        .env("INFERGATE_CONTROL_TOKEN", "validate-token")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "an invalid routing config was accepted");
    assert!(log.contains("unknown pool"), "the error does not say why:\n{log}");
}
