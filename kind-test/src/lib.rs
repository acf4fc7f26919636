//! Offline validation of what infergate ships for Kubernetes, where no cluster runs:
//! manifests against the real CRD schemas and Kubernetes' own types, and models of the
//! Envoy config that Envoy Gateway and Istio produce once our patches are applied.
#![forbid(unsafe_code)]

pub mod core_kinds;
pub mod crd_schemas;
pub mod manifests;
pub mod platforms;

use std::path::{Path, PathBuf};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
}
