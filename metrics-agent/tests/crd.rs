//! The InferenceGatewayConfig CRD we ship is the one the code generates, and the
//! example resource we ship is a valid config.

use infergate_metrics_agent::discovery::kubernetes::{InferenceGatewayConfig, crd_yaml};

fn deploy(path: &str) -> String {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

#[test]
fn the_shipped_crd_is_the_generated_one() {
    assert_eq!(
        deploy("crds/infergate.io_inferencegatewayconfigs.yaml"),
        crd_yaml().unwrap(),
        "regenerate with: target/debug/metrics-agent crd > deploy/crds/infergate.io_inferencegatewayconfigs.yaml"
    );
}

#[test]
fn the_example_resource_is_a_valid_config() {
    let object: InferenceGatewayConfig =
        serde_yaml_ng::from_str(&deploy("examples/inferencegatewayconfig.yaml")).unwrap();
    object.spec.config.validate().unwrap();
    assert_eq!(object.spec.config.pools.len(), 2);
}

#[test]
fn an_unknown_field_in_the_spec_is_refused() {
    let text = deploy("examples/inferencegatewayconfig.yaml").replace("scrape_timeout_ms", "scrape_timeout");
    let error = serde_yaml_ng::from_str::<InferenceGatewayConfig>(&text).unwrap_err().to_string();
    assert!(error.contains("scrape_timeout"), "{error}");
}
