//! Prompt block hashing: one hash per full block, capped, and chained, so that a
//! prompt's hashes begin with the hashes of any prefix of it.
#![no_main]

use infergate_core::prefix::prompt_block_hashes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&shape, prompt)) = input.split_first() else { return };
    let block_chars = u32::from(shape % 64) + 4;
    let max_blocks = u32::from(shape / 64) * 8 + 1;
    let hashes = prompt_block_hashes(prompt, "m", None, block_chars, max_blocks);
    let full_blocks = prompt.len() / block_chars as usize;
    assert_eq!(hashes.len(), full_blocks.min(max_blocks as usize));
    let half = &prompt[..prompt.len() / 2];
    let prefix = prompt_block_hashes(half, "m", None, block_chars, max_blocks);
    assert_eq!(&hashes[..prefix.len()], &prefix[..], "hashes are not chained");
    if !hashes.is_empty() {
        let other = prompt_block_hashes(prompt, "m", Some("adapter"), block_chars, max_blocks);
        assert_ne!(hashes[0], other[0], "the adapter does not seed the chain");
    }
});
