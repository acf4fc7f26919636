//! RFC 6902 operations, optionally located by an RFC 9535 JSONPath as Envoy Gateway does.

use serde_json::{Value, json};
use serde_json_path::JsonPath;

/// Applies one `{op, path, value, from, jsonPath}` operation to `document`. With a
/// `jsonPath`, the operation applies at each node it selects, `path` appended.
pub(crate) fn apply(document: &mut Value, operation: &Value) -> Result<(), String> {
    let path = operation["path"].as_str().unwrap_or_default();
    let pointers = match operation["jsonPath"].as_str() {
        Some(expression) => {
            let json_path = JsonPath::parse(expression).map_err(|e| format!("jsonPath {expression}: {e}"))?;
            let found: Vec<String> =
                json_path.query_located(document).locations().map(|l| l.to_json_pointer()).collect();
            if found.is_empty() {
                return Err(format!("jsonPath {expression} selects nothing"));
            }
            found.into_iter().map(|p| format!("{p}{path}")).collect()
        }
        None => vec![path.to_string()],
    };
    for pointer in pointers {
        let mut single = json!({"op": operation["op"], "path": pointer});
        for key in ["value", "from"] {
            if !operation[key].is_null() {
                single[key] = operation[key].clone();
            }
        }
        let patch: json_patch::Patch = serde_json::from_value(json!([single])).map_err(|e| format!("{single}: {e}"))?;
        json_patch::patch(document, &patch).map_err(|e| format!("{single}: {e}"))?;
    }
    Ok(())
}
