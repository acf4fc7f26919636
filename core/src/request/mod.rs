//! The Body-Based Router's view of an OpenAI request: which model it asks for, and
//! whether it streams.

mod endpoint_kind;
mod intake;
mod model_field;
mod prompt;
mod scan;
mod typed_fields;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::api_error::ApiError;
use crate::config::{Criticality, PrefixSettings, check_model_name};
use crate::prefix::{PromptHasher, PromptHashes};
pub use endpoint_kind::{ApiEndpoint, classify};
pub use intake::{BodyEvent, BodyReader};
use model_field::ModelField;
pub use scan::{Checked, RequestScanner, ScanOutcome};

/// What routing needs from a request body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InferenceRequest {
    pub model: String,
    pub stream: bool,
    /// The prefix keys of the prompt the engine will see (tools, then each message),
    /// hashed as the body was read; the text itself is not kept.
    pub prompt: PromptHashes,
    /// The prompt's length in bytes.
    pub prompt_len: usize,
    /// `max_completion_tokens`, else `max_tokens`, if given.
    pub max_tokens: Option<u32>,
    /// What the client asked for in `x-infergate-criticality` (a header, not the body).
    pub criticality: Option<Criticality>,
}

impl InferenceRequest {
    /// The whole prompt's length in bytes.
    pub fn prompt_chars(&self) -> usize {
        self.prompt_len
    }

    /// A request for `model` whose prompt is `text`, messages only, as the engine sees
    /// it (the benchmark's requests, and tests').
    pub fn of_text(model: &str, text: &[u8], prefix: &PrefixSettings) -> Self {
        Self {
            model: model.into(),
            prompt: PromptHashes::of_messages(text, prefix),
            prompt_len: text.len(),
            ..Self::default()
        }
    }

    /// Prompt tokens, at about `CHARS_PER_TOKEN` characters per token.
    pub fn prompt_tokens(&self) -> u32 {
        u32::try_from(self.prompt_chars().div_ceil(crate::wire::CHARS_PER_TOKEN)).unwrap_or(u32::MAX).max(1)
    }
}

/// The fields the gateway reads; the typed ones are kept as their JSON text and checked
/// by `typed_fields`, which words a refusal as OpenAI does.
#[derive(Deserialize)]
struct Body<'a> {
    #[serde(default, borrow)]
    model: ModelField<'a>,
    #[serde(default, borrow)]
    stream: Option<&'a RawValue>,
    #[serde(default, borrow)]
    messages: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tools: Option<&'a RawValue>,
    #[serde(default, borrow)]
    prompt: Option<&'a RawValue>,
    #[serde(default, borrow)]
    max_tokens: Option<&'a RawValue>,
    #[serde(default, borrow)]
    max_completion_tokens: Option<&'a RawValue>,
}

/// [`Body`]'s typed fields, checked.
struct Fields<'a> {
    model: ModelField<'a>,
    stream: Option<bool>,
    max_tokens: Option<u32>,
}

/// Parses a complete request body, and hashes its prompt for prefix matching with
/// `prefix`. Unknown fields are ignored (they belong to the model server); a duplicate
/// `model` key is refused, because the server might read the other one.
pub fn parse_request(body: &[u8], prefix: &PrefixSettings) -> Result<InferenceRequest, ApiError> {
    let (fields, rendered) = read_body(body)?;
    let mut hasher = PromptHasher::new(prefix);
    hasher.tools.feed(&rendered.tools);
    hasher.messages.feed(&rendered.messages);
    hasher.prompt.feed(&rendered.prompt);
    into_request(fields.model, fields.stream, hasher.hashes(), rendered.len(), fields.max_tokens)
}

/// The body's fields, and its prompt rendered as the engine will see it.
fn read_body(body: &[u8]) -> Result<(Fields<'_>, prompt::Rendered), ApiError> {
    if body.is_empty() {
        return Err(ApiError::invalid_request(
            "invalid_body",
            None,
            "The request body is empty; send a JSON object with a `model` field.",
        ));
    }
    // serde_json skips unknown fields without checking their UTF-8; the model server
    // would then choke on what the gateway let through, so the whole body is checked.
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::invalid_request(
            "invalid_json",
            None,
            format!("The request body is not valid UTF-8: invalid byte at offset {}.", e.valid_up_to()),
        )
    })?;
    let kind = typed_fields::json_type(text.as_bytes());
    // A valid value of another type is refused in words, not as the parser names the
    // type it expected; an invalid one goes on to the parser, for the error's position.
    if kind != "an object" && serde_json::from_str::<&RawValue>(text).is_ok() {
        return Err(ApiError::invalid_request(
            "invalid_json",
            None,
            format!("The request body must be a JSON object, but it is {kind}."),
        ));
    }
    // `from_slice` like every JSON read in this crate, so the `.wasm` holds one reader.
    let parsed: Body<'_> = serde_json::from_slice(text.as_bytes()).map_err(|e| {
        let said = e.to_string();
        let repeated = said.strip_prefix("duplicate field `").and_then(|rest| rest.split('`').next());
        repeated.and_then(typed_fields::duplicate).unwrap_or_else(|| {
            ApiError::invalid_request("invalid_json", None, format!("The request body is not valid JSON: {e}."))
        })
    })?;
    let fields = Fields {
        model: parsed.model,
        stream: typed_fields::boolean("stream", raw(parsed.stream))?,
        max_tokens: typed_fields::token_count("max_completion_tokens", raw(parsed.max_completion_tokens))?
            .or(typed_fields::token_count("max_tokens", raw(parsed.max_tokens))?),
    };
    let messages = prompt::messages(parsed.messages)?;
    let rendered =
        prompt::render(parsed.tools.map(RawValue::get), messages.as_deref(), parsed.prompt.map(RawValue::get));
    Ok((fields, rendered))
}

fn raw(value: Option<&RawValue>) -> Option<&[u8]> {
    value.map(|r| r.get().as_bytes())
}

/// What both parsers share once the fields are read: the checks on `model`.
fn into_request(
    model: ModelField<'_>,
    stream: Option<bool>,
    prompt: PromptHashes,
    prompt_len: usize,
    max_tokens: Option<u32>,
) -> Result<InferenceRequest, ApiError> {
    let model = match model {
        ModelField::Missing => {
            return Err(ApiError::invalid_request(
                "missing_required_parameter",
                Some("model"),
                "Missing required parameter: 'model'.",
            ));
        }
        ModelField::NotAString(kind) => {
            return Err(ApiError::invalid_request(
                "invalid_type",
                Some("model"),
                format!("Invalid type for 'model': expected a string, but got {kind} instead."),
            ));
        }
        ModelField::String(name) => name,
    };
    check_model_name(&model)
        .map_err(|why| ApiError::invalid_request("invalid_model", Some("model"), format!("`model` {why}.")))?;
    Ok(InferenceRequest {
        model: model.into_owned(),
        stream: stream.unwrap_or(false),
        prompt,
        prompt_len,
        max_tokens,
        criticality: None,
    })
}

#[cfg(test)]
mod tests;
