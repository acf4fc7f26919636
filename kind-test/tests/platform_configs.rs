//! The Envoy config that Envoy Gateway and Istio would produce from our manifests, with
//! our patches applied, passes Envoy's own validation.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;

use infergate_core::config::InfergateConfig;
use infergate_e2e::artifacts;
use infergate_envoy_config::kubernetes::{GatewayRef, KubernetesOptions, WasmSource, envoy_gateway, istio};
use infergate_kind_test::platforms::{self, Placement};
use infergate_kind_test::workspace_root;
use serde_json::Value;

const SHA256: &str = "3f0bcae4a8a7b8e1c0f5b1d9c8e7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9";

fn config() -> InfergateConfig {
    InfergateConfig::from_yaml_file(&workspace_root().join("kind-test/infergate.yaml"))
        .expect("kind-test/infergate.yaml")
}

fn options() -> KubernetesOptions {
    let gateway = GatewayRef {
        namespace: "infergate-demo".into(),
        name: "infergate".into(),
        listener: "http".into(),
        pods_namespace: "envoy-gateway-system".into(),
        // The model's listener is on the Gateway's port, as Istio's is.
        port: placement().gateway.port(),
    };
    let wasm = WasmSource {
        url: "http://infergate-wasm.infergate-demo.svc:8080/infergate_filter.wasm".into(),
        sha256: SHA256.into(),
        image: None,
    };
    KubernetesOptions::new(gateway, wasm)
}

fn placement() -> Placement {
    let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
    Placement {
        gateway: addr("127.0.0.1:18080"),
        admin: addr("127.0.0.1:18081"),
        service_endpoints: BTreeMap::from([(
            "infergate-llama".to_string(),
            vec![addr("10.0.0.1:8000"), addr("10.0.0.2:8000"), addr("10.0.0.3:8000"), addr("10.0.0.4:8000")],
        )]),
        wasm_cache: addr("127.0.0.1:18002"),
    }
}

fn envoy_validates(bootstrap: &Value) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("envoy.json");
    std::fs::write(&path, serde_json::to_string_pretty(bootstrap).unwrap()).unwrap();
    let output = Command::new(artifacts::envoy())
        .args(["--mode", "validate", "--disable-hot-restart", "-c"])
        .arg(&path)
        .env("INFERGATE_CONTROL_TOKEN", "validate-token")
        .output()
        .expect("run envoy --mode validate");
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "envoy rejected the config:\n{log}\n{}",
        serde_json::to_string_pretty(bootstrap).unwrap()
    );
}

fn wasm_filters(listener: &Value) -> Vec<Value> {
    let chain = if listener["default_filter_chain"].is_null() {
        &listener["filter_chains"][0]
    } else {
        &listener["default_filter_chain"]
    };
    chain["filters"][0]["typed_config"]["http_filters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["typed_config"]["@type"] == "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm")
        .cloned()
        .collect()
}

#[test]
fn envoy_gateway_with_our_patches_validates() {
    let documents = envoy_gateway::render(&config(), &options()).unwrap();
    let bootstrap = platforms::envoy_gateway::bootstrap(&documents, &placement()).unwrap();
    envoy_validates(&bootstrap);
    assert_roles_share_one_vm(&bootstrap);
}

#[test]
fn istio_with_our_patches_validates() {
    let documents = istio::render(&config(), &options()).unwrap();
    let bootstrap = platforms::istio::bootstrap(&documents, &placement()).unwrap();
    envoy_validates(&bootstrap);
    assert_roles_share_one_vm(&bootstrap);
}

/// The router can pause on headers, and it, the control filter and the singleton share
/// `vm_id: infergate`, whatever the platform named them.
fn assert_roles_share_one_vm(bootstrap: &Value) {
    let listeners = bootstrap["static_resources"]["listeners"].as_array().unwrap();
    let mut roles = Vec::new();
    for listener in listeners {
        for filter in wasm_filters(listener) {
            let config = &filter["typed_config"]["config"];
            assert_eq!(config["vm_config"]["vm_id"], "infergate", "{filter}");
            assert_eq!(config["allow_on_headers_stop_iteration"], true, "{filter}");
            roles.push(config["root_id"].as_str().unwrap().to_string());
        }
    }
    let singleton = &bootstrap["bootstrap_extensions"][0]["typed_config"]["config"];
    assert_eq!(singleton["vm_config"]["vm_id"], "infergate");
    roles.push(singleton["root_id"].as_str().unwrap().to_string());
    roles.sort();
    assert_eq!(roles, ["control", "router", "singleton"]);
}
