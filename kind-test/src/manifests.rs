//! Reading manifests: multi-document YAML as JSON values.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

/// Every non-empty document of a YAML file.
pub fn documents(path: &Path) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn parse(text: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value = Value::deserialize(document).map_err(|e| e.to_string())?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

pub fn type_of(document: &Value) -> (String, String) {
    let field = |name: &str| document[name].as_str().unwrap_or_default().to_string();
    (field("apiVersion"), field("kind"))
}

/// `Kind namespace/name`, to say which document failed.
pub fn describe(document: &Value) -> String {
    let metadata = &document["metadata"];
    format!(
        "{} {}/{}",
        document["kind"].as_str().unwrap_or("?"),
        metadata["namespace"].as_str().unwrap_or("-"),
        metadata["name"].as_str().unwrap_or("?")
    )
}
