//! The filter as an OCI artifact, the form Istio's `WasmPlugin` and Envoy Gateway's
//! `EnvoyExtensionPolicy` pull: one config blob (`application/vnd.module.wasm.config.v1+json`)
//! and one layer that is the `.wasm` itself (`application/vnd.module.wasm.content.layer.v1+wasm`),
//! written as an OCI image layout directory that `oras`, `crane` or `skopeo` can push.

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;

use oci_spec::image::{
    Descriptor, DescriptorBuilder, Digest, ImageIndexBuilder, ImageManifest, ImageManifestBuilder, MediaType,
    OciLayoutBuilder, SCHEMA_VERSION,
};
use sha2::{Digest as _, Sha256};

pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.module.wasm.config.v1+json";
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/vnd.module.wasm.content.layer.v1+wasm";
/// The index annotation that names the image's tag in a layout.
pub const REF_NAME_ANNOTATION: &str = "org.opencontainers.image.ref.name";

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("building the OCI document: {0}")]
    Spec(#[from] oci_spec::OciSpecError),
    #[error("encoding JSON: {0}")]
    Json(#[from] serde_json::Error),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ImageError + '_ {
    move |source| ImageError::Io { path: path.display().to_string(), source }
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    format!("sha256:{}", hash.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// Writes `bytes` as a blob of the layout and describes it.
fn put_blob(layout: &Path, media_type: MediaType, bytes: &[u8]) -> Result<Descriptor, ImageError> {
    let digest = sha256_digest(bytes);
    let hex = digest.trim_start_matches("sha256:");
    let dir = layout.join("blobs").join("sha256");
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let path = dir.join(hex);
    std::fs::write(&path, bytes).map_err(io(&path))?;
    Ok(DescriptorBuilder::default()
        .media_type(media_type)
        .digest(Digest::from_str(&digest)?)
        .size(u64::try_from(bytes.len()).unwrap_or(u64::MAX))
        .build()?)
}

/// Writes the OCI image layout of `wasm` under `layout`, tagged `tag`; returns the
/// manifest's digest.
pub fn write_layout(wasm: &[u8], tag: &str, layout: &Path) -> Result<String, ImageError> {
    std::fs::create_dir_all(layout).map_err(io(layout))?;
    let oci_layout = OciLayoutBuilder::default().image_layout_version("1.0.0").build()?;
    let marker = layout.join("oci-layout");
    std::fs::write(&marker, serde_json::to_vec(&oci_layout)?).map_err(io(&marker))?;
    let config = serde_json::to_vec(&serde_json::json!({"architecture": "wasm", "os": "wasip1"}))?;
    let config = put_blob(layout, MediaType::Other(WASM_CONFIG_MEDIA_TYPE.into()), &config)?;
    let layer = put_blob(layout, MediaType::Other(WASM_LAYER_MEDIA_TYPE.into()), wasm)?;
    let manifest: ImageManifest = ImageManifestBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageManifest)
        .config(config)
        .layers(vec![layer])
        .build()?;
    let manifest_descriptor = put_blob(layout, MediaType::ImageManifest, &serde_json::to_vec(&manifest)?)?;
    let digest = manifest_descriptor.digest().to_string();
    let mut tagged = manifest_descriptor;
    tagged.set_annotations(Some(HashMap::from([(REF_NAME_ANNOTATION.to_string(), tag.to_string())])));
    let index = ImageIndexBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![tagged])
        .build()?;
    let index_path = layout.join("index.json");
    std::fs::write(&index_path, serde_json::to_vec_pretty(&index)?).map_err(io(&index_path))?;
    Ok(digest)
}
