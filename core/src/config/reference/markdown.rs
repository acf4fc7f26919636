//! The reference as Markdown: one part per file, a section per object with a short
//! table of its fields, then each field with its type, default, allowed values and a
//! YAML example.

use std::fmt::Write;

use serde_json::Value;

use super::model::{Entry, Section, Segment};

/// One config file's part of the page.
pub struct FilePart<'a> {
    pub name: &'a str,
    /// Prefixes every anchor of this file, so that two files' fields do not collide.
    pub anchor_prefix: &'a str,
    pub minimal_example: &'a str,
    pub root: &'a Section,
}

/// The anchor of a path in a file: `routing.cost.decode_step_ms` → `routing-cost-decode_step_ms`.
pub fn anchor(prefix: &str, path: &str) -> String {
    let path = if path.is_empty() { "top" } else { path };
    format!("{prefix}{}", path.replace("[]", "").replace('.', "-"))
}

pub fn file_part(out: &mut String, part: &FilePart<'_>) {
    let _ = writeln!(out, "<a id=\"{}\"></a>\n## {}\n", anchor(part.anchor_prefix, "file"), part.name);
    let _ = writeln!(out, "{}\n", part.root.entry.doc);
    let _ = writeln!(out, "### A minimal {}\n\n```yaml\n{}```\n", part.name, part.minimal_example);
    section(out, part, part.root);
}

fn section(out: &mut String, part: &FilePart<'_>, section_: &Section) {
    let entry = &section_.entry;
    let path = entry.path();
    let title = if path.is_empty() { "The top level".to_string() } else { format!("`{path}`") };
    let _ = writeln!(out, "<a id=\"{}\"></a>\n### {title}\n", anchor(part.anchor_prefix, &path));
    // The top level's doc opens the file's part already.
    if !path.is_empty() {
        let _ = writeln!(out, "{}\n", entry.doc);
        facts(out, entry, true);
    }
    let _ = writeln!(out, "| Field | Type | Default |\n| --- | --- | --- |");
    let rows = section_.fields.iter().chain(section_.sections.iter().map(|s| &s.entry));
    for field in rows {
        let _ = writeln!(
            out,
            "| [`{}`](#{}) | {} | {} |",
            field.key(),
            anchor(part.anchor_prefix, &field.path()),
            field.type_name,
            default_cell(field, field_is_section(section_, field))
        );
    }
    out.push('\n');
    for field in &section_.fields {
        leaf(out, part, field);
    }
    for child in &section_.sections {
        section(out, part, child);
    }
}

fn field_is_section(parent: &Section, field: &Entry) -> bool {
    parent.sections.iter().any(|s| std::ptr::eq(&s.entry, field))
}

fn leaf(out: &mut String, part: &FilePart<'_>, entry: &Entry) {
    let path = entry.path();
    let _ = writeln!(out, "<a id=\"{}\"></a>\n#### `{path}`\n", anchor(part.anchor_prefix, &path));
    let _ = writeln!(out, "{}\n", entry.doc);
    facts(out, entry, false);
    if !entry.values.is_empty() {
        let default = entry.default.as_ref().and_then(Value::as_str);
        let _ = writeln!(out, "Values:\n");
        for (value, doc) in &entry.values {
            let marker = if Some(value.as_str()) == default { " (the default)" } else { "" };
            let doc = one_line(doc);
            let _ = writeln!(out, "- `{value}`{marker}{}{doc}", if doc.is_empty() { "" } else { ": " });
        }
        out.push('\n');
    }
    if let Some(example) = &entry.example {
        let _ = writeln!(out, "```yaml\n{}```\n", example_yaml(&entry.segments, example));
    }
}

/// Type, default and allowed values as a short list.
fn facts(out: &mut String, entry: &Entry, is_section: bool) {
    let _ = writeln!(out, "- Type: {}", entry.type_name);
    let _ = writeln!(out, "- Default: {}", default_cell(entry, is_section));
    if let Some(allowed) = &entry.allowed {
        let _ = writeln!(out, "- Allowed: {allowed}");
    }
    out.push('\n');
}

fn default_cell(entry: &Entry, is_section: bool) -> String {
    if entry.required {
        return "required".into();
    }
    match &entry.default {
        None | Some(Value::Null) => "unset".into(),
        Some(_) if is_section => "each field's default".into(),
        Some(value) => format!("`{}`", flow(value)),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A YAML fragment that sets one field, nested under its path.
pub fn example_yaml(segments: &[Segment], value: &Value) -> String {
    let mut out = String::new();
    let mut indent = 0;
    let mut item = false;
    for (i, segment) in segments.iter().enumerate() {
        let Segment::Key(key) = segment else {
            item = true;
            continue;
        };
        out.push_str(&" ".repeat(indent));
        if item {
            out.push_str("- ");
            indent += 2;
            item = false;
        }
        out.push_str(key);
        if i + 1 == segments.len() {
            let _ = writeln!(out, ": {}", flow(value));
        } else {
            out.push_str(":\n");
            indent += 2;
        }
    }
    out
}

/// A JSON value in YAML's flow style, on one line.
pub fn flow(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => scalar(s),
        Value::Array(items) => format!("[{}]", items.iter().map(flow).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => {
            let pairs: Vec<String> = map.iter().map(|(k, v)| format!("{}: {}", scalar(k), flow(v))).collect();
            format!("{{{}}}", pairs.join(", "))
        }
    }
}

/// A string plain where YAML reads it back as the same string, quoted otherwise.
fn scalar(text: &str) -> String {
    let plain = text.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '/')
        && text.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:@+".contains(c))
        && !text.ends_with(':')
        && text.parse::<f64>().is_err()
        && !["true", "false", "null", "yes", "no", "on", "off", "y", "n"].contains(&text.to_ascii_lowercase().as_str());
    if plain { text.to_string() } else { Value::String(text.to_string()).to_string() }
}
