//! Short CRD descriptions that link to the reference. Kubernetes shows a field's
//! `description` in `kubectl explain` and editors; a paragraph of prose there repeats
//! the reference, and an enum's values lose their own docs in the CRD altogether. So a
//! long description is cut to its first sentence plus a link to the field's entry in
//! `docs/configuration.md`, and an enum's gets the link. The full text stays in the
//! schema under [`FULL_DOC_KEY`], where the reference reads it; Kubernetes' schema type
//! has no such field, so the CRD leaves it out.

use schemars::Schema;
use schemars::transform::Transform;
use serde_json::{Map, Value};

use super::{PAGE_URL, anchor};

/// Where a shortened description's full text is kept.
pub const FULL_DOC_KEY: &str = "x-infergate-doc";

/// Descriptions longer than this, or of more than one sentence, are shortened.
const LONGEST: usize = 160;

/// `#[schemars(transform = LinkToReference)]` on the root type of `infergate.yaml`.
pub struct LinkToReference;

impl Transform for LinkToReference {
    fn transform(&mut self, schema: &mut Schema) {
        if let Some(root) = schema.as_object_mut() {
            if let Some(Value::String(doc)) = root.get("description").cloned() {
                let first = first_sentence(&doc);
                root.insert(
                    "description".into(),
                    format!("{first} Every field, with its default and allowed values: {PAGE_URL}").into(),
                );
                root.insert(FULL_DOC_KEY.into(), doc.into());
            }
            walk(root, "");
        }
    }
}

fn walk(object: &mut Map<String, Value>, path: &str) {
    let target = match object.get_mut("items").and_then(Value::as_object_mut) {
        Some(items) if items.contains_key("properties") => items,
        _ => object,
    };
    let Some(properties) = target.get_mut("properties").and_then(Value::as_object_mut) else { return };
    for (key, property) in properties.iter_mut() {
        let Some(property) = property.as_object_mut() else { continue };
        let path = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
        shorten(property, &path);
        let nested = property.get("items").is_some_and(|i| i.get("properties").is_some());
        walk(property, &if nested { format!("{path}[]") } else { path.clone() });
    }
}

fn shorten(property: &mut Map<String, Value>, path: &str) {
    let Some(Value::String(doc)) = property.get("description").cloned() else { return };
    let first = first_sentence(&doc);
    let is_enum =
        property.get("oneOf").is_some() || property.get("anyOf").is_some_and(|a| a.to_string().contains("oneOf"));
    if first.len() == doc.trim().len() && doc.len() <= LONGEST && !is_enum {
        return;
    }
    let link = format!("{PAGE_URL}#{}", anchor("", path));
    property.insert("description".into(), format!("{first} More: {link}").into());
    property.insert(FULL_DOC_KEY.into(), doc.into());
}

/// The text up to the first full stop that ends a sentence, on one line.
fn first_sentence(doc: &str) -> String {
    let flat = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut end = flat.len();
    for (i, _) in flat.match_indices(". ") {
        let next = flat.get(i + 2..).and_then(|rest| rest.chars().next());
        if next.is_some_and(|c| c.is_uppercase() || c == '`') {
            end = i + 1;
            break;
        }
    }
    flat.get(..end).unwrap_or(&flat).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentence_ends_at_a_full_stop_before_a_capital() {
        assert_eq!(first_sentence("Per-pod timeout.\nA slow pod, e.g. one busy."), "Per-pod timeout.");
        assert_eq!(first_sentence("Ends at e.g. nothing"), "Ends at e.g. nothing");
    }
}
