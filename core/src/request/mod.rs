//! The Body-Based Router's view of an OpenAI request: which model it asks for, and
//! whether it streams.

mod endpoint_kind;
mod intake;
mod model_field;
mod prompt;
mod scan;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::api_error::ApiError;
use crate::config::{Criticality, check_model_name};
pub use endpoint_kind::{ApiEndpoint, classify};
pub use intake::{BodyEvent, BodyReader};
use model_field::ModelField;
pub use scan::{Checked, RequestScanner, ScanOutcome};

/// What routing needs from a request body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InferenceRequest {
    pub model: String,
    pub stream: bool,
    /// The prompt bytes the engine will see (tools, then each message), for prefix
    /// hashing. The streaming scanner keeps only the first bytes, as many as hashing
    /// can use.
    pub prompt: Vec<u8>,
    /// The whole prompt's length in bytes, when `prompt` holds only its start.
    pub prompt_len: usize,
    /// `max_completion_tokens`, else `max_tokens`, if given.
    pub max_tokens: Option<u32>,
    /// What the client asked for in `x-infergate-criticality` (a header, not the body).
    pub criticality: Option<Criticality>,
}

impl InferenceRequest {
    /// The whole prompt's length in bytes.
    pub fn prompt_chars(&self) -> usize {
        self.prompt_len.max(self.prompt.len())
    }

    /// Prompt tokens, at about `CHARS_PER_TOKEN` characters per token.
    pub fn prompt_tokens(&self) -> u32 {
        u32::try_from(self.prompt_chars().div_ceil(crate::wire::CHARS_PER_TOKEN)).unwrap_or(u32::MAX).max(1)
    }
}

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(default, borrow)]
    model: ModelField<'a>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default, borrow)]
    messages: Option<Vec<prompt::Message<'a>>>,
    #[serde(default, borrow)]
    tools: Option<&'a RawValue>,
    #[serde(default, borrow)]
    prompt: Option<&'a RawValue>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
}

/// Parses a complete request body. Unknown fields are ignored (they belong to the
/// model server); a duplicate `model` key is refused, because the server might read
/// the other one.
pub fn parse_request(body: &[u8]) -> Result<InferenceRequest, ApiError> {
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
    // `from_slice` like every JSON read in this crate, so the `.wasm` holds one reader.
    let parsed: Body<'_> = serde_json::from_slice(text.as_bytes()).map_err(|e| {
        let text = e.to_string();
        let param = if text.contains("`model`") {
            Some("model")
        } else if text.contains("boolean") {
            Some("stream")
        } else if text.contains("messages") || text.contains("sequence") {
            Some("messages")
        } else {
            None
        };
        ApiError::invalid_request(
            "invalid_json",
            param,
            format!("The request body is not valid JSON for this API: {e}."),
        )
    })?;
    let prompt =
        prompt::render(parsed.tools.map(RawValue::get), parsed.messages.as_deref(), parsed.prompt.map(RawValue::get));
    let prompt_len = prompt.len();
    into_request(parsed.model, parsed.stream, prompt, prompt_len, parsed.max_completion_tokens.or(parsed.max_tokens))
}

/// What both parsers share once the fields are read: the checks on `model`.
fn into_request(
    model: ModelField<'_>,
    stream: Option<bool>,
    prompt: Vec<u8>,
    prompt_len: usize,
    max_tokens: Option<u32>,
) -> Result<InferenceRequest, ApiError> {
    let model = match model {
        ModelField::Missing => {
            return Err(ApiError::invalid_request(
                "missing_model",
                Some("model"),
                "The request body has no `model` field.",
            ));
        }
        ModelField::NotAString(kind) => {
            return Err(ApiError::invalid_request(
                "invalid_model",
                Some("model"),
                format!("`model` must be a string, got {kind}."),
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
