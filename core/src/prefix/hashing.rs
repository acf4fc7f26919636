//! Block hashes of a prompt: fixed-size blocks of its bytes, each hash seeded with the
//! previous one, so a block's hash stands for the whole prefix up to it. The chain is
//! salted with the model and the LoRA adapter: the same text under another adapter has
//! other KV values.

use xxhash_rust::xxh64::xxh64;

/// Hashes the full blocks of `prompt`, at most `max_blocks` of them.
pub fn prompt_block_hashes(
    prompt: &[u8],
    model: &str,
    adapter: Option<&str>,
    block_chars: u32,
    max_blocks: u32,
) -> Vec<u64> {
    let block = (block_chars as usize).max(1);
    let mut parent = xxh64(model.as_bytes(), xxh64(adapter.unwrap_or("").as_bytes(), 0x696e_6667));
    prompt
        .chunks_exact(block)
        .take(max_blocks as usize)
        .map(|chunk| {
            parent = xxh64(chunk, parent);
            parent
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn salts_separate_models_and_adapters() {
        let text = [b'a'; 128];
        let base = prompt_block_hashes(&text, "m", None, 64, 256);
        assert_eq!(base.len(), 2);
        assert_ne!(base, prompt_block_hashes(&text, "m", Some("lora"), 64, 256));
        assert_ne!(base, prompt_block_hashes(&text, "other", None, 64, 256));
    }

    proptest! {
        #[test]
        fn a_shared_prefix_gives_shared_leading_hashes(
            common in proptest::collection::vec(any::<u8>(), 0..2048),
            tail_a in proptest::collection::vec(any::<u8>(), 0..512),
            tail_b in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let a: Vec<u8> = common.iter().chain(&tail_a).copied().collect();
            let b: Vec<u8> = common.iter().chain(&tail_b).copied().collect();
            let ha = prompt_block_hashes(&a, "m", None, 64, 256);
            let hb = prompt_block_hashes(&b, "m", None, 64, 256);
            let full_common_blocks = common.len() / 64;
            prop_assert_eq!(&ha[..full_common_blocks.min(ha.len())], &hb[..full_common_blocks.min(hb.len())]);
            prop_assert_eq!(ha.len(), (a.len() / 64).min(256));
        }

        #[test]
        fn the_block_cap_is_respected(len in 0usize..40_000, cap in 1u32..300) {
            let text = vec![b'x'; len];
            prop_assert!(prompt_block_hashes(&text, "m", None, 64, cap).len() <= cap as usize);
        }
    }
}
