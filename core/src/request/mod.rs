//! The Body-Based Router's view of an OpenAI request: which model it asks for, and
//! whether it streams.

mod endpoint_kind;
mod model_field;

use serde::Deserialize;

use crate::api_error::ApiError;
use crate::config::check_model_name;
pub use endpoint_kind::{ApiEndpoint, classify};
use model_field::ModelField;

/// What routing needs from a request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InferenceRequest {
    pub model: String,
    pub stream: bool,
}

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(default, borrow)]
    model: ModelField<'a>,
    #[serde(default)]
    stream: Option<bool>,
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
    let parsed: Body<'_> = serde_json::from_slice(body).map_err(|e| {
        let param = if e.to_string().contains("`model`") {
            Some("model")
        } else if e.to_string().contains("boolean") {
            Some("stream")
        } else {
            None
        };
        ApiError::invalid_request(
            "invalid_json",
            param,
            format!("The request body is not valid JSON for this API: {e}."),
        )
    })?;
    let model = match parsed.model {
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
    check_model_name(&model).map_err(|why| {
        ApiError::invalid_request("invalid_model", Some("model"), format!("`model` {why}."))
    })?;
    Ok(InferenceRequest {
        model: model.into_owned(),
        stream: parsed.stream.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests;
