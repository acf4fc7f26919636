//! The OCI artifact read back as a registry client would: the layout marker, the index,
//! the manifest and its media types, every digest, and a layer that is the built
//! `.wasm` byte for byte.

use std::path::{Path, PathBuf};
use std::process::Command;

use infergate_envoy_config::wasm_image::{
    REF_NAME_ANNOTATION, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, sha256_digest,
};
use serde_json::Value;

fn built_wasm() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/wasm32-wasip1/wasm/infergate_filter.wasm");
    assert!(path.exists(), "{} is missing: run `make wasm` (make test does)", path.display());
    path
}

/// A blob by digest, checked against its digest and descriptor size.
fn blob(layout: &Path, descriptor: &Value) -> Vec<u8> {
    let digest = descriptor["digest"].as_str().unwrap();
    let bytes = std::fs::read(layout.join("blobs/sha256").join(digest.trim_start_matches("sha256:"))).unwrap();
    assert_eq!(sha256_digest(&bytes), digest, "blob content does not match its digest");
    assert_eq!(descriptor["size"].as_u64(), Some(bytes.len() as u64));
    bytes
}

#[test]
fn the_layout_holds_the_filter_as_a_two_blob_wasm_artifact() {
    let wasm = built_wasm();
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    let output = Command::new(env!("CARGO_BIN_EXE_infergate-wasm-image"))
        .args(["--wasm", wasm.to_str().unwrap(), "--out", layout.to_str().unwrap(), "--tag", "v9"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

    let marker: Value = serde_json::from_slice(&std::fs::read(layout.join("oci-layout")).unwrap()).unwrap();
    assert_eq!(marker["imageLayoutVersion"], "1.0.0");
    let index: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    assert_eq!(index["schemaVersion"], 2);
    let entry = &index["manifests"][0];
    assert_eq!(entry["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(entry["annotations"][REF_NAME_ANNOTATION], "v9");
    let manifest: Value = serde_json::from_slice(&blob(&layout, entry)).unwrap();
    assert_eq!(manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(manifest["config"]["mediaType"], WASM_CONFIG_MEDIA_TYPE);
    let config: Value = serde_json::from_slice(&blob(&layout, &manifest["config"])).unwrap();
    assert!(config.is_object());
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["mediaType"], WASM_LAYER_MEDIA_TYPE);
    assert_eq!(blob(&layout, &layers[0]), std::fs::read(&wasm).unwrap(), "the layer is not the built .wasm");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with(entry["digest"].as_str().unwrap()), "{stdout}");
}

#[test]
fn a_missing_wasm_is_a_clear_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_infergate-wasm-image"))
        .args(["--wasm", "/nonexistent.wasm"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("make wasm"));
}
