//! The configuration reference, `docs/configuration.md`, generated from the types that
//! parse the files users write: `infergate.yaml` ([`InfergateConfig`], which is also
//! the InferenceGatewayConfig resource's `spec`) and `infergate-global.yaml`
//! ([`GlobalRouterConfig`]). The filter's plugin configuration is rendered by
//! `infergate-envoy-config`, never written by hand, so it is not in the reference.
//!
//! Why the JSON Schema (schemars, behind the off-by-default `schema` feature) rather
//! than a hand-written reflection trait: the schema already is the typed config seen
//! from outside. Its descriptions are the doc comments, its defaults are the values
//! serde fills in (computed by calling the same default functions), and its enums list
//! exactly what serde accepts, so none of these can drift from the code; a reflection
//! trait would have to restate every field, default and doc comment by hand. The CRD
//! is generated from the same schema, so the reference and the CRD agree too. The
//! filter builds core without the feature and does not grow. What a schema cannot say,
//! the limits `validate` enforces, comes from [`super::limits`], which validation uses
//! and [`super::limits::Annotate`] copies into the schema next to each field.
//!
//! `cargo run -p infergate-core --features schema,yaml --bin config-reference` (what
//! `make config-reference` runs) writes the page; `core/tests/config_reference.rs`
//! fails while the committed page differs from [`render`]'s.

mod crd;
mod markdown;
mod model;

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::Value;

pub use crd::LinkToReference;
pub use markdown::{anchor, example_yaml, flow};
pub use model::{Entry, Section, Segment};

use super::InfergateConfig;
use crate::global::GlobalRouterConfig;

/// Where the page lives in the repository, and where readers of the CRD find it.
pub const PAGE: &str = "docs/configuration.md";
pub const PAGE_URL: &str = concat!(env!("CARGO_PKG_REPOSITORY"), "/blob/main/docs/configuration.md");

/// The anchor prefix of `infergate-global.yaml`'s fields.
pub const GLOBAL_PREFIX: &str = "tier2-";

/// The smallest valid `infergate.yaml`: one pool of static pods, one model.
pub const MINIMAL_INFERGATE: &str = "\
version: 1
pools:
  - name: llama
    endpoints: [10.0.0.5:8000, 10.0.0.6:8000]
models:
  - name: meta-llama/Llama-3.1-8B-Instruct
    pool: llama
";

/// The smallest valid `infergate-global.yaml`: two clusters in two regions.
pub const MINIMAL_GLOBAL: &str = "\
version: 1
global:
  local_region: us-east
clusters:
  - name: east
    region: us-east
    gateway: 10.0.1.10:8080
    cost_per_million_tokens: 0.6
  - name: west
    region: us-west
    gateway: 10.0.2.10:8080
    cost_per_million_tokens: 0.4
";

/// A feature that spans sections: what it is, its page, and the fields it reads.
struct Feature {
    name: &'static str,
    page: &'static str,
    summary: &'static str,
    /// Paths in `infergate.yaml`; a `tier2:` prefix names one in `infergate-global.yaml`.
    fields: &'static [&'static str],
}

const FEATURES: &[Feature] = &[
    Feature {
        name: "Flow control",
        page: "flow-control.md",
        summary: "The gateway queue, off unless `flow_control.enabled`. A band's release also waits for KV-cache use \
                  below `routing.admission.kv_cache_threshold`; a model's criticality picks its band; early decision \
                  is off while it is on.",
        fields: &[
            "flow_control",
            "routing.admission.kv_cache_threshold",
            "models[].criticality",
            "gateway.early_decision",
        ],
    },
    Feature {
        name: "Discovery",
        page: "kubernetes.md",
        summary: "Pods found in Kubernetes, by label or through an `InferencePool`, resolved by the metrics agent \
                  and added to the pool's static `endpoints`; the agent scrapes them like the others.",
        fields: &["pools[].discovery", "pools[].endpoints", "agent"],
    },
    Feature {
        name: "Tier 2: the global router",
        page: "global-router.md",
        summary: "A separate file, `infergate-global.yaml`, for the router in front of several clusters' gateways. Its \
                  `gateway` section has the fields of `infergate.yaml`'s; each cluster keeps its own `infergate.yaml`.",
        fields: &["tier2:file", "tier2:gateway", "tier2:global", "tier2:clusters[]", "tier2:rate_limits"],
    },
];

/// The root schema of a config type, subschemas inlined as the CRD has them.
pub fn schema_of<T: JsonSchema>() -> Result<Value, String> {
    let generator = SchemaSettings::draft2020_12().with(|s| s.inline_subschemas = true).into_generator();
    serde_json::to_value(generator.into_root_schema_for::<T>()).map_err(|e| e.to_string())
}

/// Both files' section trees, as the page prints them.
pub fn files() -> Result<(Section, Section), String> {
    let infergate = model::read(&schema_of::<InfergateConfig>()?)?;
    let global = model::read(&schema_of::<GlobalRouterConfig>()?)?;
    Ok((infergate, global))
}

/// The whole page. Fails on a field without a doc comment, a field without a default
/// or example, a minimal example that does not validate, or a feature naming a field
/// that does not exist.
pub fn render() -> Result<String, String> {
    InfergateConfig::from_yaml_str(MINIMAL_INFERGATE, "the minimal infergate.yaml").map_err(|e| e.to_string())?;
    GlobalRouterConfig::from_yaml_str(MINIMAL_GLOBAL, "the minimal infergate-global.yaml")
        .map_err(|e| e.to_string())?;
    let (infergate, global) = files()?;
    let mut anchors = Vec::new();
    check(&infergate, "", &mut anchors)?;
    check(&global, GLOBAL_PREFIX, &mut anchors)?;

    let mut out = String::new();
    out.push_str(HEADER);
    features(&mut out, &anchors)?;
    let parts = [
        markdown::FilePart {
            name: "infergate.yaml",
            anchor_prefix: "",
            minimal_example: MINIMAL_INFERGATE,
            root: &infergate,
        },
        markdown::FilePart {
            name: "infergate-global.yaml",
            anchor_prefix: GLOBAL_PREFIX,
            minimal_example: MINIMAL_GLOBAL,
            root: &global,
        },
    ];
    for part in &parts {
        markdown::file_part(&mut out, part);
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    Ok(out)
}

const HEADER: &str = "\
# Configuration reference

<!-- Generated by `make config-reference` from core/src/config/ and core/src/global/config.rs. Do not edit. -->

This page is generated from the Rust types that parse `infergate.yaml` and
`infergate-global.yaml`: every description is the field's doc comment, every default is
the value the parser fills in, and every allowed range is the one validation enforces
(`core/src/config/limits.rs`). To change it, edit those, then run
`make config-reference`; `make test-fast` fails while this page is out of date.

The InferenceGatewayConfig resource (`deploy/crds/`) has exactly the schema of
`infergate.yaml` as its `spec`. The filter's plugin configuration is rendered from
these files by `infergate-envoy-config` and is not written by hand.

Defaults are YAML values. A field marked *unset* may be left out; its description says
what that means.

- [Which fields each feature uses](#features)
- [infergate.yaml](#file): [a minimal file](#a-minimal-infergateyaml), [all fields](#top)
- [infergate-global.yaml](#tier2-file): [a minimal file](#a-minimal-infergate-globalyaml), [all fields](#tier2-top)

";

fn features(out: &mut String, anchors: &[String]) -> Result<(), String> {
    out.push_str("<a id=\"features\"></a>\n## Which fields each feature uses\n\n");
    out.push_str("| Feature | What it uses | Fields |\n| --- | --- | --- |\n");
    for feature in FEATURES {
        let mut links = Vec::new();
        for field in feature.fields {
            let (prefix, path, shown) = match field.strip_prefix("tier2:") {
                Some(path) => (GLOBAL_PREFIX, path, format!("infergate-global.yaml: `{path}`")),
                None => ("", *field, format!("`{field}`")),
            };
            let shown = if path == "file" { "infergate-global.yaml".to_string() } else { shown };
            let target = anchor(prefix, path);
            if !anchors.contains(&target) {
                return Err(format!("feature {:?} names {field}, which the reference does not have", feature.name));
            }
            links.push(format!("[{shown}](#{target})"));
        }
        out.push_str(&format!(
            "| [{}]({}) | {} | {} |\n",
            feature.name,
            feature.page,
            feature.summary.split_whitespace().collect::<Vec<_>>().join(" "),
            links.join(", ")
        ));
    }
    out.push('\n');
    Ok(())
}

/// Every field documented and shown by example; collects the anchors.
fn check(section: &Section, prefix: &str, anchors: &mut Vec<String>) -> Result<(), String> {
    let path = section.entry.path();
    if section.entry.doc.trim().is_empty() {
        return Err(format!("`{path}` has no doc comment, on the field or on its type"));
    }
    anchors.push(anchor(prefix, if path.is_empty() { "file" } else { &path }));
    anchors.push(anchor(prefix, &path));
    for field in &section.fields {
        let path = field.path();
        if field.doc.trim().is_empty() {
            return Err(format!("`{path}` has no doc comment"));
        }
        if field.example.is_none() {
            return Err(format!("`{path}` has neither a default nor an example (#[schemars(example = ...)])"));
        }
        anchors.push(anchor(prefix, &path));
    }
    section.sections.iter().try_for_each(|child| check(child, prefix, anchors))
}
