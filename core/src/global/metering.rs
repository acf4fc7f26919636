//! Token metering for the global rate limits: who the tenant is, what admission
//! charges, and what an answer's `usage` says it used. The filter produces these; the
//! rate limit service reads the same `UsageReport`.

use serde::{Deserialize, Serialize};

/// A stable, opaque tenant id: the header's value hashed, so that API keys never reach
/// Redis keys or logs. Requests without the header share `anonymous`.
pub fn tenant_id(header_value: Option<&str>) -> String {
    match header_value.map(str::trim).filter(|v| !v.is_empty()) {
        Some(value) => format!("t{:016x}", xxhash_rust::xxh64::xxh64(value.as_bytes(), 0x696e_6665_7267_6174)),
        None => "anonymous".to_string(),
    }
}

/// One answer's tokens, reported after it completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageReport {
    pub tenant: String,
    pub model: String,
    /// What admission counted: the prompt estimate.
    pub charged_tokens: u64,
    /// What the answer's `usage` says: prompt plus completion tokens.
    pub used_tokens: u64,
}

/// The tokens a whole (non-streamed) answer reports in `usage`.
pub fn answer_tokens(body: &[u8]) -> Option<u64> {
    crate::usage::of_answer(body).map(|u| u.tokens())
}

/// The tokens a chunk of an SSE stream reports, if it holds the usage event (sent last
/// when the client asked for `stream_options.include_usage`).
pub fn stream_chunk_tokens(chunk: &[u8]) -> Option<u64> {
    crate::usage::of_stream_chunk(chunk).map(|u| u.tokens())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_are_hashed_and_stable() {
        let a = tenant_id(Some("Bearer sk-secret"));
        assert_eq!(a, tenant_id(Some("Bearer sk-secret")));
        assert_ne!(a, tenant_id(Some("Bearer sk-other")));
        assert!(!a.contains("secret"));
        assert_eq!(tenant_id(None), "anonymous");
        assert_eq!(tenant_id(Some("  ")), "anonymous");
    }

    #[test]
    fn usage_is_read_from_whole_answers_and_from_the_streams_last_event() {
        let whole = br#"{"id":"x","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}"#;
        assert_eq!(answer_tokens(whole), Some(42));
        assert_eq!(answer_tokens(br#"{"usage":{"prompt_tokens":5,"completion_tokens":6}}"#), Some(11));
        assert_eq!(answer_tokens(br#"{"choices":[]}"#), None);
        assert_eq!(answer_tokens(b"not json"), None);
        let stream = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\n\ndata: [DONE]\n\n";
        assert_eq!(stream_chunk_tokens(stream), Some(7));
        assert_eq!(stream_chunk_tokens(b"data: {\"choices\":[]}\n\n"), None);
    }
}
