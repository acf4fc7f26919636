//! The `usage` object of an OpenAI answer: what the engine counted. The global role
//! meters tokens with it; the router learns each pool's characters per token from it.

use serde::Deserialize;

/// Token counts an answer reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    pub total_tokens: Option<u64>,
}

impl Usage {
    /// Prompt plus completion tokens.
    pub fn tokens(&self) -> u64 {
        self.total_tokens.unwrap_or(self.prompt_tokens.saturating_add(self.completion_tokens))
    }
}

#[derive(Deserialize)]
struct WithUsage {
    usage: Option<Usage>,
}

/// The `usage` of a whole (non-streamed) answer.
pub fn of_answer(body: &[u8]) -> Option<Usage> {
    serde_json::from_slice::<WithUsage>(body).ok()?.usage
}

/// The `usage` in a chunk of an SSE stream, if it holds the usage event (sent last when
/// the client asked for `stream_options.include_usage`). A chunk without the word
/// `"usage"` is skipped without parsing: every token of a stream passes here.
pub fn of_stream_chunk(chunk: &[u8]) -> Option<Usage> {
    const KEY: &[u8] = b"\"usage\"";
    if !chunk.windows(KEY.len()).any(|w| w == KEY) {
        return None;
    }
    chunk
        .split(|&b| b == b'\n')
        .rev()
        .filter_map(|line| line.strip_prefix(b"data:"))
        .find_map(|data| serde_json::from_slice::<WithUsage>(data.trim_ascii()).ok()?.usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_read_from_a_whole_answer_and_from_a_stream_chunk() {
        let whole = br#"{"id":"x","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}"#;
        assert_eq!(of_answer(whole).map(|u| (u.prompt_tokens, u.tokens())), Some((12, 42)));
        let chunk =
            b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n";
        assert_eq!(of_stream_chunk(chunk).map(|u| (u.prompt_tokens, u.tokens())), Some((3, 7)));
        assert_eq!(of_stream_chunk(b"data: {\"choices\":[{\"delta\":{\"content\":\"usage\"}}]}\n\n"), None);
        assert_eq!(of_answer(b"{not json"), None);
    }
}
