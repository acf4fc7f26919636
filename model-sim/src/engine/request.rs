//! A request as the engine sees it: prompt length, the hash chain of its full prompt
//! blocks (what the prefix cache matches on), output length and adapter.

use xxhash_rust::xxh64::xxh64;

/// Tokens are approximated as bytes of prompt text, as on the routing side.
pub use infergate_core::wire::CHARS_PER_TOKEN;

#[derive(Debug, Clone, PartialEq)]
pub struct SimRequest {
    pub id: u64,
    /// Virtual arrival time, seconds.
    pub arrival: f64,
    pub prompt_tokens: u32,
    /// One hash per full block of the prompt, each chained on the one before.
    pub block_hashes: Vec<u64>,
    pub output_tokens: u32,
    pub adapter: Option<String>,
    /// The decode leg of a split request: a prefill pod computed the prompt and its KV
    /// cache arrives with the request (vLLM's `kv_transfer_params` with
    /// `do_remote_prefill`), so only the last prompt token is computed here.
    pub kv_transferred: bool,
}

impl SimRequest {
    /// Builds a request from the prompt text the chat template would produce.
    pub fn from_text(
        id: u64,
        arrival: f64,
        prompt: &[u8],
        output_tokens: u32,
        adapter: Option<String>,
        block_size: u32,
    ) -> Self {
        let prompt_tokens = u32::try_from(prompt.len().div_ceil(CHARS_PER_TOKEN)).unwrap_or(u32::MAX).max(1);
        Self {
            id,
            arrival,
            prompt_tokens,
            block_hashes: block_hashes(prompt, adapter.as_deref(), block_size),
            output_tokens: output_tokens.max(1),
            adapter,
            kv_transferred: false,
        }
    }

    /// The same request as the decode leg of a split: its prompt's KV comes from the
    /// prefill pod.
    #[must_use]
    pub fn with_transferred_kv(mut self) -> Self {
        self.kv_transferred = true;
        self
    }
}

/// The chain of full-block hashes of `prompt`, salted with the adapter: the same text
/// under another adapter has other KV values, so it must not match.
pub fn block_hashes(prompt: &[u8], adapter: Option<&str>, block_size: u32) -> Vec<u64> {
    let block_bytes = (block_size as usize * CHARS_PER_TOKEN).max(1);
    let mut parent = xxh64(adapter.unwrap_or("").as_bytes(), 0x1f6a_7e57);
    prompt
        .chunks_exact(block_bytes)
        .map(|block| {
            parent = xxh64(block, parent);
            parent
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_prefixes_share_leading_hashes_only() {
        let a = block_hashes(&[b'a'; 256], None, 16);
        let mut text = vec![b'a'; 128];
        text.extend([b'b'; 128]);
        let b = block_hashes(&text, None, 16);
        assert_eq!(a.len(), 4);
        assert_eq!(a[..2], b[..2]);
        assert_ne!(a[2], b[2]);
    }

    #[test]
    fn the_adapter_salts_the_chain() {
        assert_ne!(block_hashes(&[b'a'; 64], None, 16), block_hashes(&[b'a'; 64], Some("x"), 16));
    }

    #[test]
    fn partial_blocks_are_not_hashed() {
        assert!(block_hashes(&[b'a'; 63], None, 16).is_empty());
        assert_eq!(SimRequest::from_text(1, 0.0, &[b'a'; 63], 5, None, 16).prompt_tokens, 16);
    }
}
