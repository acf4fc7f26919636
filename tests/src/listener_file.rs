//! Envoy with its listeners in a watched file (LDS from the filesystem), so that a test
//! can change a filter's configuration as a control plane does: Envoy builds the new
//! listener, drains the old one and tears its plugin down, without a restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use infergate_envoy_config::render_bootstrap_yaml;
use serde_json::{Value, json};

use crate::artifacts;
use crate::stack::BootstrapWriter;

const LISTENER_TYPE: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";

/// The listeners file and the version of what it holds.
#[derive(Clone)]
pub struct ListenerFile {
    dir: PathBuf,
    version: Arc<AtomicU64>,
}

impl ListenerFile {
    /// Listeners kept in `dir`, which must outlive the stack.
    pub fn new(dir: &Path) -> Self {
        Self { dir: dir.to_path_buf(), version: Arc::new(AtomicU64::new(0)) }
    }

    fn path(&self) -> PathBuf {
        self.dir.join("listeners.json")
    }

    /// The stack's plain bootstrap, with its listeners moved to the file.
    pub fn writer(&self) -> BootstrapWriter {
        let file = self.clone();
        BootstrapWriter(Arc::new(move |config| {
            let options = artifacts::render_options();
            let yaml = render_bootstrap_yaml(config, &options).expect("render the bootstrap");
            let mut bootstrap: Value = serde_yaml_ng::from_str(&yaml).expect("the bootstrap is YAML");
            let listeners = bootstrap["static_resources"]
                .as_object_mut()
                .and_then(|resources| resources.remove("listeners"))
                .expect("the bootstrap has listeners");
            file.write(listeners);
            bootstrap["dynamic_resources"] = json!({"lds_config": {
                "resource_api_version": "V3",
                "path_config_source": {
                    "path": file.path(),
                    "watched_directory": {"path": file.dir},
                },
            }});
            serde_json::to_string_pretty(&bootstrap).expect("JSON")
        }))
    }

    /// Rewrites the file with `edit` applied to the router plugin's configuration.
    pub fn edit_router_config(&self, edit: impl Fn(&mut Value)) {
        let text = std::fs::read_to_string(self.path()).expect("read the listeners");
        let mut resources: Value = serde_json::from_str(&text).expect("the listeners are JSON");
        let mut edited = 0;
        for listener in resources["resources"].as_array_mut().expect("resources") {
            let chains = listener["filter_chains"].as_array_mut().expect("filter chains");
            for filter in chains.iter_mut().flat_map(|c| c["filters"].as_array_mut().into_iter().flatten()) {
                let http_filters = filter["typed_config"]["http_filters"].as_array_mut();
                for http_filter in http_filters.into_iter().flatten() {
                    let value = &mut http_filter["typed_config"]["config"]["configuration"]["value"];
                    let Some(mut plugin) = value.as_str().and_then(|v| serde_json::from_str::<Value>(v).ok()) else {
                        continue;
                    };
                    if plugin["role"] == "router" {
                        edit(&mut plugin);
                        *value = Value::String(plugin.to_string());
                        edited += 1;
                    }
                }
            }
        }
        assert_eq!(edited, 1, "one router filter in the listeners");
        let listeners = resources["resources"].take();
        self.write(listeners);
    }

    /// Replaces the file in one rename, as Envoy's watch expects.
    fn write(&self, listeners: Value) {
        let version = self.version.fetch_add(1, Ordering::Relaxed) + 1;
        let resources: Vec<Value> = listeners
            .as_array()
            .expect("a list of listeners")
            .iter()
            .map(|listener| {
                let mut listener = listener.clone();
                listener["@type"] = json!(LISTENER_TYPE);
                listener
            })
            .collect();
        let text = json!({"version_info": version.to_string(), "resources": resources}).to_string();
        let staged = self.dir.join(".listeners.json.new");
        std::fs::write(&staged, text).expect("write the listeners");
        std::fs::rename(&staged, self.path()).expect("move the listeners into place");
    }
}
