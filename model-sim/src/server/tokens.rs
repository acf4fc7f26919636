//! The token ids a pod reports for a prompt, where a router asks for them (the render
//! endpoints) or reads them (KV events). model-sim has no tokenizer: a token is
//! [`CHARS_PER_TOKEN`] bytes of prompt text, as everywhere in infergate, and its id a
//! hash of those bytes within SmolLM2's vocabulary. Equal text at an equal position
//! gives equal ids, which is all prefix matching needs.

use xxhash_rust::xxh64::xxh64;

use crate::engine::CHARS_PER_TOKEN;

/// SmolLM2's vocabulary size; any fixed bound would do.
const VOCABULARY: u32 = 49_152;

/// One id per started [`CHARS_PER_TOKEN`] bytes of `prompt`.
pub fn token_ids(prompt: &[u8]) -> Vec<u32> {
    prompt.chunks(CHARS_PER_TOKEN).map(|chunk| (xxh64(chunk, 0) % u64::from(VOCABULARY)) as u32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_of_the_text_is_a_prefix_of_the_ids() {
        let long = token_ids(b"the same start, then more");
        let short = token_ids(b"the same start, then");
        assert_eq!(long.len(), 7);
        assert_eq!(&long[..5], &short[..5]);
        assert!(long.iter().all(|&id| id < VOCABULARY));
    }
}
