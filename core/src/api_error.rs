//! OpenAI-shaped error replies, the only way the gateway says no to a client.

use serde::Serialize;

/// An error answered to the client as `{"error": {...}}`, the shape OpenAI clients parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub error_type: ErrorType,
    pub code: &'static str,
    pub param: Option<&'static str>,
    pub message: String,
    /// Seconds for a `Retry-After` header, on 429 and 503.
    pub retry_after_s: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    InvalidRequestError,
    ServiceUnavailableError,
    RateLimitError,
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: Body<'a>,
}

#[derive(Serialize)]
struct Body<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    error_type: ErrorType,
    param: Option<&'static str>,
    code: &'static str,
}

impl ApiError {
    pub fn invalid_request(code: &'static str, param: Option<&'static str>, message: impl Into<String>) -> Self {
        Self {
            status: 400,
            error_type: ErrorType::InvalidRequestError,
            code,
            param,
            message: message.into(),
            retry_after_s: None,
        }
    }

    pub fn model_not_found(model: &str) -> Self {
        Self {
            status: 404,
            code: "model_not_found",
            param: Some("model"),
            message: format!("The model `{model}` does not exist or is not served by this gateway."),
            ..Self::invalid_request("", None, "")
        }
    }

    pub fn body_too_large(limit_bytes: u64) -> Self {
        Self {
            status: 413,
            code: "request_too_large",
            message: format!("The request body exceeds this gateway's limit of {limit_bytes} bytes."),
            ..Self::invalid_request("", None, "")
        }
    }

    pub fn not_found_path(path: &str) -> Self {
        Self {
            status: 404,
            code: "unknown_url",
            message: format!("Unknown request URL: {path}. Use /v1/chat/completions, /v1/completions or /v1/models."),
            ..Self::invalid_request("", None, "")
        }
    }

    pub fn no_ready_endpoint(pool: &str, retry_after_s: u32) -> Self {
        Self {
            status: 503,
            error_type: ErrorType::ServiceUnavailableError,
            code: "no_ready_endpoint",
            param: None,
            message: format!("No model server of pool `{pool}` is ready to take the request; retry shortly."),
            retry_after_s: Some(retry_after_s),
        }
    }

    /// The worker's routing state was in use when a callback needed it. Envoy runs one
    /// callback at a time per worker, so this answers a host that re-enters the
    /// filter, instead of a panic.
    /// The gateway requires an identity (`identity.required`) and the request has none:
    /// no token, or one that Envoy's `jwt_authn` did not verify, or no identity header.
    pub fn missing_identity() -> Self {
        Self {
            status: 401,
            error_type: ErrorType::InvalidRequestError,
            code: "invalid_api_key",
            param: None,
            message: "This gateway needs to know who is asking: send a valid token (or the identity your \
                      operator configured); the request had none, or one that could not be verified."
                .to_string(),
            retry_after_s: None,
        }
    }

    pub fn gateway_busy() -> Self {
        Self {
            status: 503,
            error_type: ErrorType::ServiceUnavailableError,
            code: "gateway_busy",
            param: None,
            message: "The gateway could not take the request on this worker; retry.".to_string(),
            retry_after_s: Some(1),
        }
    }

    /// Every pod of the pool is saturated and the request may be shed.
    pub fn pool_saturated(pool: &str, retry_after_s: u32) -> Self {
        Self {
            status: 429,
            error_type: ErrorType::RateLimitError,
            code: "pool_saturated",
            param: None,
            message: format!(
                "Every model server of pool `{pool}` is saturated and this request is sheddable; retry later."
            ),
            retry_after_s: Some(retry_after_s),
        }
    }

    /// The gateway queue answered a held request: 429 (sheddable) or 503 (the others),
    /// `code` naming the reason (`queue_full`, `displaced`, `expired`).
    pub fn queue_refused(status: u16, code: &'static str, message: String, retry_after_s: u32) -> Self {
        let error_type = if status == 429 { ErrorType::RateLimitError } else { ErrorType::ServiceUnavailableError };
        Self { status, error_type, code, param: None, message, retry_after_s: Some(retry_after_s) }
    }

    /// A tenant used up its requests or tokens per minute for a model.
    pub fn rate_limited(what: &str, limit: u64, model: &str, retry_after_s: u32) -> Self {
        Self {
            status: 429,
            error_type: ErrorType::RateLimitError,
            code: "rate_limit_exceeded",
            param: None,
            message: format!(
                "Rate limit reached for `{model}`: {limit} {what} per minute for this tenant. Retry in {retry_after_s} s."
            ),
            retry_after_s: Some(retry_after_s),
        }
    }

    /// The JSON body, always well-formed whatever the message holds.
    pub fn body(&self) -> Vec<u8> {
        let envelope = Envelope {
            error: Body { message: &self.message, error_type: self.error_type, param: self.param, code: self.code },
        };
        // Serializing plain strings and enums into a Vec cannot fail; fall back to a fixed
        // body rather than panic if it ever did.
        serde_json::to_vec(&envelope).unwrap_or_else(|_| {
            br#"{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}"#.to_vec()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_is_openai_shaped() {
        let body: serde_json::Value = serde_json::from_slice(&ApiError::model_not_found("x\"y").body()).unwrap();
        assert_eq!(body["error"]["code"], "model_not_found");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["param"], "model");
        assert!(body["error"]["message"].as_str().unwrap().contains("x\"y"));
    }

    #[test]
    fn no_ready_endpoint_carries_retry_after() {
        let e = ApiError::no_ready_endpoint("a", 2);
        assert_eq!((e.status, e.retry_after_s), (503, Some(2)));
        let body: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
        assert_eq!(body["error"]["type"], "service_unavailable_error");
    }
}
