//! Prompt hashing: a key at each anchor the prompt reaches within the cap, its end
//! increasing, any cut of the text giving the same keys, and keys chained, so that a
//! prompt's keys begin with the keys of any prefix of it.
#![no_main]

use infergate_core::config::PrefixSettings;
use infergate_core::prefix::{PromptHasher, PromptHashes, anchors};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&shape, prompt)) = input.split_first() else { return };
    let settings = PrefixSettings {
        block_chars: u32::from(shape % 64) + 4,
        max_blocks: u32::from(shape / 64) * 300 + 1,
        ..PrefixSettings::default()
    };
    let chain = PromptHashes::of_messages(prompt, &settings).salted("m", None);
    let full_blocks = (prompt.len() / settings.block_chars as usize) as u64;
    let reach = full_blocks.min(u64::from(settings.max_blocks));
    assert_eq!(chain.keys.len() as u64, anchors::anchors_within(reach));
    assert_eq!(u64::from(chain.blocks), full_blocks);
    assert!(chain.ends.windows(2).all(|w| w[0] < w[1]), "ends do not increase");
    assert!(chain.ends.iter().all(|&end| anchors::is_anchor(u64::from(end))));
    let mut pieces = PromptHasher::new(&settings);
    prompt.chunks(usize::from(shape) + 1).for_each(|piece| pieces.messages.feed(piece));
    assert_eq!(pieces.hashes().salted("m", None), chain, "the cut changed the keys");
    let half = PromptHashes::of_messages(&prompt[..prompt.len() / 2], &settings).salted("m", None);
    assert_eq!(&chain.keys[..half.keys.len()], &half.keys[..], "keys are not chained");
    if !chain.keys.is_empty() {
        let other = PromptHashes::of_messages(prompt, &settings).salted("m", Some("adapter"));
        assert_ne!(chain.keys[0], other.keys[0], "the adapter does not salt the keys");
    }
});
