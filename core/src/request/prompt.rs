//! The prompt as the engine will see it, for prefix hashing: tool definitions first (a
//! chat template renders them into the system prompt), then every message in order as
//! a role tag and its content, then a completions `prompt`. A conversation's next turn
//! therefore extends the bytes of the previous turn, which is what makes prefix
//! affinity work across turns. The three sections are kept apart: the streaming scanner
//! meets them in the body's order and hashes each as it comes (`prefix::PromptHasher`).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::typed_fields;
use crate::api_error::ApiError;

/// A message; only what shapes the prompt is kept, the rest is skipped unparsed.
#[derive(Deserialize)]
pub(super) struct Message<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_calls: Option<&'a RawValue>,
}

/// The body's `messages`, read into [`Message`]s: absent or `null` is none; anything
/// but an array of objects whose `role` is a string is refused in OpenAI's words, with
/// the place of the first wrong value.
pub(super) fn messages(raw: Option<&RawValue>) -> Result<Option<Vec<Message<'_>>>, ApiError> {
    let Some(raw) = raw.filter(|r| r.get() != "null") else { return Ok(None) };
    let items: Vec<&RawValue> = serde_json::from_slice(raw.get().as_bytes())
        .map_err(|_| typed_fields::invalid_type("messages", "an array", raw.get().as_bytes()))?;
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let text = item.get().as_bytes();
        let Ok(fields) = serde_json::from_slice::<BTreeMap<Cow<'_, str>, &RawValue>>(text) else {
            return Err(typed_fields::invalid_type_at("messages", &format!("messages[{i}]"), "an object", text));
        };
        if let Some(role) = fields.get("role").filter(|r| !matches!(r.get().as_bytes().first(), Some(b'"' | b'n'))) {
            let path = format!("messages[{i}].role");
            return Err(typed_fields::invalid_type_at("messages", &path, "a string", role.get().as_bytes()));
        }
        let message = serde_json::from_slice::<Message<'_>>(text).map_err(|e| {
            let said = e.to_string();
            let repeated = said.strip_prefix("duplicate field `").and_then(|rest| rest.split('`').next());
            let what =
                repeated.map_or_else(|| "it cannot be read".to_string(), |key| format!("it has the key '{key}' twice"));
            ApiError::invalid_request(
                "invalid_value",
                Some("messages"),
                format!("Invalid value for 'messages[{i}]': {what}."),
            )
        })?;
        out.push(message);
    }
    Ok(Some(out))
}

/// Appends a content value, given as its JSON text: a string's text; a list of parts'
/// texts (or, for a part without text such as an image, its raw JSON); anything else
/// as raw JSON.
pub(super) fn push_content(out: &mut Vec<u8>, text: &str) {
    match text.as_bytes().first() {
        Some(b'"') => match serde_json::from_slice::<Cow<'_, str>>(text.as_bytes()) {
            Ok(s) => out.extend_from_slice(s.as_bytes()),
            Err(_) => out.extend_from_slice(text.as_bytes()),
        },
        Some(b'[') => match serde_json::from_slice::<Vec<&RawValue>>(text.as_bytes()) {
            Ok(parts) => {
                for part in parts {
                    push_part(out, part);
                }
            }
            Err(_) => out.extend_from_slice(text.as_bytes()),
        },
        Some(b'n') => {}
        _ => out.extend_from_slice(text.as_bytes()),
    }
}

fn push_part(out: &mut Vec<u8>, part: &RawValue) {
    let Ok(fields) = serde_json::from_slice::<BTreeMap<Cow<'_, str>, &RawValue>>(part.get().as_bytes()) else {
        out.extend_from_slice(part.get().as_bytes());
        return;
    };
    match fields.get("text") {
        Some(text) => push_content(out, text.get()),
        None => {
            for (key, value) in &fields {
                out.extend_from_slice(key.as_bytes());
                out.extend_from_slice(value.get().as_bytes());
            }
        }
    }
}

/// Marks the tool definitions, which a chat template puts first.
pub(super) const TOOLS_TAG: &[u8] = b"<|tools|>";

/// A message's role tag, before its content.
pub(super) fn push_role_tag(out: &mut Vec<u8>, role: Option<&str>) {
    out.extend_from_slice(b"<|");
    out.extend_from_slice(role.unwrap_or("user").as_bytes());
    out.extend_from_slice(b"|>");
}

/// A prompt's sections, rendered.
#[derive(Debug, Default)]
pub(super) struct Rendered {
    pub tools: Vec<u8>,
    pub messages: Vec<u8>,
    pub prompt: Vec<u8>,
}

impl Rendered {
    pub fn len(&self) -> usize {
        self.tools.len() + self.messages.len() + self.prompt.len()
    }

    /// The whole prompt, sections in the engine's order.
    #[cfg(test)]
    pub fn joined(&self) -> Vec<u8> {
        [&self.tools[..], &self.messages, &self.prompt].concat()
    }
}

pub(super) fn render(tools: Option<&str>, messages: Option<&[Message<'_>]>, prompt: Option<&str>) -> Rendered {
    let mut out = Rendered::default();
    if let Some(tools) = tools {
        out.tools.extend_from_slice(TOOLS_TAG);
        out.tools.extend_from_slice(tools.as_bytes());
    }
    for message in messages.unwrap_or_default() {
        push_role_tag(&mut out.messages, message.role.as_deref());
        if let Some(content) = message.content {
            push_content(&mut out.messages, content.get());
        }
        if let Some(calls) = message.tool_calls {
            out.messages.extend_from_slice(calls.get().as_bytes());
        }
    }
    if let Some(prompt) = prompt {
        push_content(&mut out.prompt, prompt);
    }
    out
}
