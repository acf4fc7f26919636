//! The CRDs' `openAPIV3Schema`, made as strict as the API server is in effect: a field a
//! structural schema does not declare is pruned on apply, silently, so here it is an error.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use crate::manifests;

/// `apiVersion` and `kind`.
type TypeKey = (String, String);

/// A compiled schema per `apiVersion` and `kind`.
pub struct CrdCatalog {
    validators: HashMap<TypeKey, jsonschema::Validator>,
}

impl CrdCatalog {
    /// Every CRD in every `.yaml` file of `dirs`.
    pub fn load(dirs: &[&Path]) -> Result<Self, String> {
        let mut validators = HashMap::new();
        for dir in dirs {
            let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let mut paths: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
            paths.sort();
            for path in paths.iter().filter(|p| p.extension().is_some_and(|e| e == "yaml")) {
                for crd in manifests::documents(path)? {
                    for (key, schema) in versions(&crd).map_err(|e| format!("{}: {e}", path.display()))? {
                        let validator = jsonschema::validator_for(&schema)
                            .map_err(|e| format!("{}: {}/{}: {e}", path.display(), key.0, key.1))?;
                        validators.insert(key, validator);
                    }
                }
            }
        }
        Ok(Self { validators })
    }

    pub fn knows(&self, api_version: &str, kind: &str) -> bool {
        self.validators.contains_key(&(api_version.to_string(), kind.to_string()))
    }

    /// Every violation, each with the JSON pointer of the offending value.
    pub fn validate(&self, document: &Value) -> Result<(), Vec<String>> {
        let (api_version, kind) = manifests::type_of(document);
        let Some(validator) = self.validators.get(&(api_version.clone(), kind.clone())) else {
            return Err(vec![format!("no CRD schema for {api_version} {kind}")]);
        };
        let errors: Vec<String> =
            validator.iter_errors(document).map(|e| format!("{}: {e}", e.instance_path)).collect();
        if errors.is_empty() { Ok(()) } else { Err(errors) }
    }
}

fn versions(crd: &Value) -> Result<Vec<(TypeKey, Value)>, String> {
    let group = crd["spec"]["group"].as_str().ok_or("no spec.group")?;
    let kind = crd["spec"]["names"]["kind"].as_str().ok_or("no spec.names.kind")?;
    let versions = crd["spec"]["versions"].as_array().ok_or("no spec.versions")?;
    versions
        .iter()
        .map(|version| {
            let name = version["name"].as_str().ok_or("a version without a name")?;
            let mut schema = version["schema"]["openAPIV3Schema"].clone();
            if schema.is_null() {
                return Err(format!("version {name} has no openAPIV3Schema"));
            }
            // Every object has these; the API server accepts them whether or not the
            // schema lists them.
            if let Some(properties) = schema["properties"].as_object_mut() {
                for (field, kind) in [("apiVersion", "string"), ("kind", "string"), ("metadata", "object")] {
                    properties.entry(field).or_insert_with(|| serde_json::json!({"type": kind}));
                }
            }
            forbid_unknown_fields(&mut schema);
            Ok(((format!("{group}/{name}"), kind.to_string()), schema))
        })
        .collect()
}

/// Adds `additionalProperties: false` wherever the API server would prune: objects
/// that list their properties and neither keep unknown fields nor declare extra ones.
fn forbid_unknown_fields(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else { return };
    let keeps_unknown = object.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if object.contains_key("properties") && !keeps_unknown && !object.contains_key("additionalProperties") {
        object.insert("additionalProperties".to_string(), Value::Bool(false));
    }
    for (key, child) in object.iter_mut() {
        match key.as_str() {
            "properties" | "patternProperties" | "definitions" => {
                if let Some(children) = child.as_object_mut() {
                    children.values_mut().for_each(forbid_unknown_fields);
                }
            }
            "items" | "additionalProperties" | "not" => forbid_unknown_fields(child),
            "allOf" | "anyOf" | "oneOf" => {
                if let Some(children) = child.as_array_mut() {
                    children.iter_mut().for_each(forbid_unknown_fields);
                }
            }
            _ => {}
        }
    }
}
