//! The fields the gateway reads besides `model` (`stream`, the token limits, the shape
//! of `messages`), checked and refused in OpenAI's words: the code OpenAI uses
//! (`invalid_type`, `integer_below_min_value`, `integer_above_max_value`), the field in
//! `param`, and a message that names JSON's types, never Rust's. The whole-body parse
//! and the streaming scanner both check through here, so they refuse alike.

use crate::api_error::ApiError;

/// The fields a body may repeat only at its peril (the gateway and the model server
/// might read different copies), by their wire names.
const READ_FIELDS: [&str; 7] =
    ["model", "stream", "messages", "tools", "prompt", "max_tokens", "max_completion_tokens"];

/// A JSON value's type as OpenAI's errors name it, from the value's text.
pub(super) fn json_type(raw: &[u8]) -> &'static str {
    let text = trim(raw);
    match text.first() {
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        Some(b'[') => "an array",
        Some(b'{') => "an object",
        Some(_) if text.iter().all(|b| b.is_ascii_digit() || *b == b'-') => "an integer",
        Some(_) => "a decimal number",
        None => "nothing",
    }
}

fn trim(raw: &[u8]) -> &[u8] {
    let start = raw.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(raw.len());
    let end = raw.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(start, |e| e + 1);
    raw.get(start..end).unwrap_or_default()
}

/// `param` holds a value of another type than `expected`.
pub(super) fn invalid_type(param: &'static str, expected: &str, raw: &[u8]) -> ApiError {
    invalid_type_at(param, param, expected, raw)
}

/// [`invalid_type`] for a part of `param`, named `path` (`messages[2].role`).
pub(super) fn invalid_type_at(param: &'static str, path: &str, expected: &str, raw: &[u8]) -> ApiError {
    ApiError::invalid_request(
        "invalid_type",
        Some(param),
        format!("Invalid type for '{path}': expected {expected}, but got {} instead.", json_type(raw)),
    )
}

/// An optional boolean (`stream`); `null` is the same as absent.
pub(super) fn boolean(param: &'static str, raw: Option<&[u8]>) -> Result<Option<bool>, ApiError> {
    let Some(raw) = raw else { return Ok(None) };
    match trim(raw) {
        b"true" => Ok(Some(true)),
        b"false" => Ok(Some(false)),
        b"null" => Ok(None),
        _ => Err(invalid_type(param, "a boolean", raw)),
    }
}

/// An optional count of tokens (`max_tokens`, `max_completion_tokens`): a whole number
/// from 0 to 2³² − 1; `null` is the same as absent.
pub(super) fn token_count(param: &'static str, raw: Option<&[u8]>) -> Result<Option<u32>, ApiError> {
    let Some(raw) = raw else { return Ok(None) };
    let text = trim(raw);
    if text == b"null" {
        return Ok(None);
    }
    if json_type(text) != "an integer" {
        return Err(invalid_type(param, "an integer", raw));
    }
    let shown = String::from_utf8_lossy(text);
    let negative = text.first() == Some(&b'-');
    match shown.parse::<u32>() {
        Ok(n) => Ok(Some(n)),
        Err(_) if negative => Err(ApiError::invalid_request(
            "integer_below_min_value",
            Some(param),
            format!("Invalid '{param}': integer below minimum value. Expected a value >= 0, but got {shown} instead."),
        )),
        Err(_) => Err(ApiError::invalid_request(
            "integer_above_max_value",
            Some(param),
            format!(
                "Invalid '{param}': integer above maximum value. Expected a value <= {}, but got {shown} instead.",
                u32::MAX
            ),
        )),
    }
}

/// The refusal for a field the body holds twice, if `field` is one the gateway reads.
pub(super) fn duplicate(field: &str) -> Option<ApiError> {
    let param = READ_FIELDS.iter().copied().find(|f| *f == field)?;
    Some(ApiError::invalid_request(
        "invalid_json",
        Some(param),
        format!(
            "The request body has the key '{param}' twice; send it once, so that the gateway and the model server read the same value."
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_named_as_json_names_them() {
        let named: Vec<&str> = [" \"a\"", "true", "null", "[1]", "{}", "-12", "1.5", "1e3", ""]
            .iter()
            .map(|v| json_type(v.as_bytes()))
            .collect();
        assert_eq!(
            named,
            [
                "a string",
                "a boolean",
                "null",
                "an array",
                "an object",
                "an integer",
                "a decimal number",
                "a decimal number",
                "nothing"
            ]
        );
    }

    #[test]
    fn a_token_count_is_a_whole_number_in_range() {
        assert_eq!(token_count("max_tokens", Some(b" 16 ")), Ok(Some(16)));
        assert_eq!(token_count("max_tokens", Some(b"null")), Ok(None));
        assert_eq!(token_count("max_tokens", None), Ok(None));
        let e = token_count("max_tokens", Some(b"\"ten\"")).unwrap_err();
        assert_eq!((e.code, e.param), ("invalid_type", Some("max_tokens")));
        assert_eq!(e.message, "Invalid type for 'max_tokens': expected an integer, but got a string instead.");
        let e = token_count("max_tokens", Some(b"2.5")).unwrap_err();
        assert_eq!(e.message, "Invalid type for 'max_tokens': expected an integer, but got a decimal number instead.");
        let e = token_count("max_completion_tokens", Some(b"-5")).unwrap_err();
        assert_eq!((e.code, e.param), ("integer_below_min_value", Some("max_completion_tokens")));
        assert!(e.message.contains("got -5 instead"), "{}", e.message);
        let e = token_count("max_tokens", Some(b"99999999999999999999999")).unwrap_err();
        assert_eq!(e.code, "integer_above_max_value");
    }

    #[test]
    fn stream_is_a_boolean_or_null() {
        assert_eq!(boolean("stream", Some(b"true")), Ok(Some(true)));
        assert_eq!(boolean("stream", Some(b"null")), Ok(None));
        let e = boolean("stream", Some(b"1")).unwrap_err();
        assert_eq!((e.code, e.param), ("invalid_type", Some("stream")));
        assert_eq!(e.message, "Invalid type for 'stream': expected a boolean, but got an integer instead.");
    }

    #[test]
    fn only_the_fields_the_gateway_reads_are_refused_when_repeated() {
        assert_eq!(duplicate("model").and_then(|e| e.param), Some("model"));
        assert!(duplicate("temperature").is_none());
    }
}
