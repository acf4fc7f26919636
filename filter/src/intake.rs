//! What every client-facing role does before it decides: refuse with an OpenAI-shaped
//! error, remove the headers only the gateway may set, and buffer the body within its
//! limit.

use infergate_core::ApiError;
use infergate_core::request::{ApiEndpoint, classify};
use proxy_wasm::types::Action;

use crate::host;

/// Headers only the gateway may set; a client's copies are removed before routing.
const RESERVED_PREFIXES: [&str; 2] = ["x-gateway-", "x-infergate-"];

/// Answers the client with `error` and stops the request.
pub fn reply_error(error: &ApiError) -> Action {
    let retry_after = error.retry_after_s.map(|s| s.to_string());
    let mut headers = vec![("content-type", "application/json")];
    if let Some(seconds) = retry_after.as_deref() {
        headers.push(("retry-after", seconds));
    }
    host::reply(u32::from(error.status), headers, &error.body());
    Action::Pause
}

pub fn strip_reserved_headers() {
    for name in host::request_header_names() {
        let lower = name.to_ascii_lowercase();
        if RESERVED_PREFIXES.iter().any(|p| lower.starts_with(p)) {
            let _ = host::set_request_header(&name, None);
        }
    }
}

/// What to do once the request headers are in.
pub enum Intake {
    /// `GET /v1/models`: the role answers it.
    ListModels,
    /// An inference request: wait for its body.
    AwaitBody,
}

pub fn on_headers(end_of_stream: bool, max_body_bytes: u64) -> Result<Intake, ApiError> {
    let method = host::request_header(":method").unwrap_or_default();
    let path = host::request_header(":path").unwrap_or_default();
    match classify(&method, &path) {
        ApiEndpoint::ListModels => Ok(Intake::ListModels),
        ApiEndpoint::Unknown => Err(ApiError::not_found_path(&path)),
        ApiEndpoint::Inference => {
            let declared = host::request_header("content-length").and_then(|v| v.parse::<u64>().ok());
            if declared.is_some_and(|len| len > max_body_bytes) {
                return Err(ApiError::body_too_large(max_body_bytes));
            }
            if end_of_stream {
                return Err(ApiError::invalid_request(
                    "invalid_body",
                    None,
                    "The request has no body; send a JSON object with a `model` field.",
                ));
            }
            Ok(Intake::AwaitBody)
        }
    }
}

/// The whole body once it is in, `None` while more is coming.
pub fn on_body(body_size: usize, end_of_stream: bool, max_body_bytes: u64) -> Result<Option<Vec<u8>>, ApiError> {
    if u64::try_from(body_size).unwrap_or(u64::MAX) > max_body_bytes {
        return Err(ApiError::body_too_large(max_body_bytes));
    }
    if !end_of_stream {
        return Ok(None);
    }
    Ok(Some(host::request_body(body_size).unwrap_or_default()))
}
