//! A config file's JSON Schema read back as the sections and fields a user writes.

use serde_json::{Map, Value};

use super::crd::FULL_DOC_KEY;
use crate::config::limits::ALLOWED_KEY;

/// One step of a YAML path: a key, or any item of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Item,
}

/// A field as the reference prints it.
#[derive(Debug, Clone)]
pub struct Entry {
    pub segments: Vec<Segment>,
    /// The doc comment: the field's own, else its type's.
    pub doc: String,
    pub type_name: String,
    /// Serde's default, as JSON; `None` when the field has none.
    pub default: Option<Value>,
    pub required: bool,
    /// The rule from `config::limits`, in words.
    pub allowed: Option<String>,
    /// An enum's values with their doc comments.
    pub values: Vec<(String, String)>,
    /// What the example shows: the `#[schemars(example)]`, else the default.
    pub example: Option<Value>,
}

/// An object a user writes: its own entry, its plain fields and its nested objects.
#[derive(Debug, Clone)]
pub struct Section {
    pub entry: Entry,
    pub fields: Vec<Entry>,
    pub sections: Vec<Section>,
}

impl Entry {
    /// `routing.cost.attention_crossover_tokens`, `pools[].name`; empty for the file.
    pub fn path(&self) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Key(key) if out.is_empty() => out.push_str(key),
                Segment::Key(key) => {
                    out.push('.');
                    out.push_str(key);
                }
                Segment::Item => out.push_str("[]"),
            }
        }
        out
    }

    /// The last key of the path.
    pub fn key(&self) -> &str {
        self.segments
            .iter()
            .rev()
            .find_map(|s| match s {
                Segment::Key(key) => Some(key.as_str()),
                Segment::Item => None,
            })
            .unwrap_or_default()
    }
}

/// Reads a root schema (subschemas inlined) into the file's section tree.
pub fn read(root: &Value) -> Result<Section, String> {
    let object = root.as_object().ok_or("the schema is not an object")?;
    let doc = object.get(FULL_DOC_KEY).or_else(|| object.get("description")).and_then(Value::as_str);
    let doc = doc.unwrap_or_default().to_string();
    let entry = Entry {
        segments: Vec::new(),
        doc,
        type_name: "object".into(),
        default: None,
        required: true,
        allowed: None,
        values: Vec::new(),
        example: None,
    };
    section(entry, object)
}

fn section(entry: Entry, object: &Map<String, Value>) -> Result<Section, String> {
    if let Some(key) = object.keys().find(|k| k.starts_with("x-infergate-unknown-limit-")) {
        return Err(format!("`{}` has a limit for a field it does not have: {key}", entry.path()));
    }
    let required: Vec<&str> = object
        .get("required")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |r| r.iter().filter_map(Value::as_str).collect());
    let properties = object
        .get("properties")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("`{}` has no fields", entry.path()))?;
    let mut out = Section { entry, fields: Vec::new(), sections: Vec::new() };
    for (key, schema) in properties {
        let property = schema.as_object().ok_or_else(|| format!("`{key}`: the schema is not an object"))?;
        let mut segments = out.entry.segments.clone();
        segments.push(Segment::Key(key.clone()));
        let is_required = required.contains(&key.as_str());
        match nested_object(property) {
            Some((object, item)) => {
                let mut child = entry_of(segments, property, is_required)?;
                if item {
                    child.segments.push(Segment::Item);
                }
                out.sections.push(section(child, object)?);
            }
            None => out.fields.push(entry_of(segments, property, is_required)?),
        }
    }
    // Plain fields first, then nested sections; each alphabetical as the schema is.
    Ok(out)
}

/// The object a property holds, directly or as the items of a list (`true`).
fn nested_object(property: &Map<String, Value>) -> Option<(&Map<String, Value>, bool)> {
    if property.contains_key("properties") {
        return Some((property, false));
    }
    let items = property.get("items").and_then(Value::as_object)?;
    items.contains_key("properties").then_some((items, true))
}

fn entry_of(segments: Vec<Segment>, property: &Map<String, Value>, required: bool) -> Result<Entry, String> {
    let items = property.get("items").and_then(Value::as_object);
    let mut doc = text(property, "description");
    if doc.is_empty() {
        doc = items.map(|i| text(i, "description")).unwrap_or_default();
    }
    let values = variants(property);
    let type_name = type_name(property, !values.is_empty());
    let default = property.get("default").cloned();
    let mut example = property.get("examples").and_then(Value::as_array).and_then(|e| e.first()).cloned();
    if example.is_none() {
        // An enum's example shows a value other than its default.
        let other = values.iter().find(|(v, _)| default.as_ref().and_then(Value::as_str) != Some(v.as_str()));
        example = other.map(|(v, _)| Value::String(v.clone()));
    }
    Ok(Entry {
        example: example.or_else(|| default.clone().filter(|d| !d.is_null())),
        segments,
        doc,
        type_name,
        default,
        required,
        allowed: property.get(ALLOWED_KEY).and_then(Value::as_str).map(str::to_string),
        values,
    })
}

/// The doc comment: in full where the CRD's description is shortened, and with the
/// `title` that schemars splits from a first line followed by a blank one.
fn text(object: &Map<String, Value>, key: &str) -> String {
    let title = object.get("title").and_then(Value::as_str).unwrap_or_default();
    let full = object.get(FULL_DOC_KEY).filter(|_| key == "description");
    let body = full.or_else(|| object.get(key)).and_then(Value::as_str).unwrap_or_default();
    match (title.is_empty(), body.is_empty()) {
        (true, _) => body.to_string(),
        (false, true) => title.to_string(),
        (false, false) => format!("{title}\n\n{body}"),
    }
}

/// An enum's values: the documented `const`s of a `oneOf` (inside the `anyOf` of an
/// optional field), or a bare `enum` list.
fn variants(property: &Map<String, Value>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    collect_variants(property, &mut out);
    out
}

fn collect_variants(schema: &Map<String, Value>, out: &mut Vec<(String, String)>) {
    if let Some(Value::String(value)) = schema.get("const") {
        out.push((value.clone(), text(schema, "description")));
    }
    for value in schema.get("enum").and_then(Value::as_array).into_iter().flatten() {
        if let Some(value) = value.as_str() {
            out.push((value.to_string(), String::new()));
        }
    }
    for key in ["oneOf", "anyOf"] {
        for choice in schema.get(key).and_then(Value::as_array).into_iter().flatten() {
            if let Some(choice) = choice.as_object() {
                collect_variants(choice, out);
            }
        }
    }
}

fn type_name(property: &Map<String, Value>, is_enum: bool) -> String {
    if is_enum {
        return "string (one of the values below)".into();
    }
    if property.contains_key("properties") {
        return "object".into();
    }
    let base = base_type(property);
    match base.as_str() {
        "array" => {
            let items = property.get("items").and_then(Value::as_object);
            format!("list of {}", items.map_or("values".to_string(), |i| plural(&base_type(i))))
        }
        "object" => {
            let values = property.get("additionalProperties").and_then(Value::as_object);
            format!("map of {}", values.map_or("values".to_string(), |v| plural(&base_type(v))))
        }
        _ => base,
    }
}

/// `type`, without the `null` of an optional field.
fn base_type(schema: &Map<String, Value>) -> String {
    match schema.get("type") {
        Some(Value::String(name)) => name.clone(),
        Some(Value::Array(names)) => {
            names.iter().filter_map(Value::as_str).find(|n| *n != "null").unwrap_or("null").to_string()
        }
        _ => "value".to_string(),
    }
}

fn plural(name: &str) -> String {
    format!("{name}s")
}
