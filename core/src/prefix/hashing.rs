//! A prompt's prefix keys, hashed as its text arrives.
//!
//! The prompt the engine sees is three sections in this order: the tool definitions,
//! the messages, and a completions `prompt`. A request body may carry them in any order
//! (the OpenAI SDK writes `tools` after `messages`), so each section is hashed on its
//! own, in one streaming pass over its text, and the sections are joined once the body
//! is read: each key of a section is mixed with the digest of the sections before it,
//! so that it still stands for the whole prompt up to its place.
//!
//! Within a section, the key at block `k` (`anchors.rs`) is the streaming xxHash64 of
//! its first `k` blocks: the hash state runs over the whole text once, and a key costs
//! one digest of that state. Hashing is thus one pass at xxHash64's speed, whatever the
//! length, and its result holds a few hundred keys (`anchors.rs`).
//!
//! The keys are not yet the model's: [`PromptHashes::salted`] mixes in the model and
//! the LoRA adapter at the decision (the same text under another adapter has other KV
//! values), as `model` may come last in the body.

use xxhash_rust::xxh64::{Xxh64, xxh64};

use super::anchors::{DENSE_BLOCKS, next_anchor};
use crate::config::PrefixSettings;

/// Text is handed to the hash state in pieces of at least this many bytes: a JSON
/// string's decoded text comes in pieces cut at every escape, often a few bytes long.
const STAGE_BYTES: usize = 4096;

/// Seeds each section's hash state.
const SECTION_SEED: u64 = 0x696e_6667_7365_6374;
/// Seeds the digest chain of the sections before a key.
const CONTEXT_SEED: u64 = 0x696e_6667_6374_7874;

/// A bijective 64-bit mixer (MurmurHash3's finalizer): keys stay uniformly distributed,
/// which the index relies on, and two keys that differ stay different.
fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// `key` under `salt`: one multiply-and-mix per key.
fn mix(key: u64, salt: u64) -> u64 {
    fmix64(key ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29))
}

/// One section's text, hashed as it streams.
#[derive(Clone)]
pub struct SectionHasher {
    block: u64,
    /// Bytes past this many are counted, not hashed (`prefix.max_blocks`).
    cap: u64,
    state: Xxh64,
    /// Text not yet handed to `state`.
    stage: Vec<u8>,
    /// Bytes taken into `state` or `stage`.
    hashed: u64,
    /// Bytes of the section, hashed or not.
    len: u64,
    /// The byte offset of the next key.
    next_key_at: u64,
    keys: Vec<u64>,
    ends: Vec<u32>,
}

impl SectionHasher {
    pub fn new(settings: &PrefixSettings) -> Self {
        let block = u64::from(settings.block_chars.max(1));
        Self {
            block,
            cap: block.saturating_mul(u64::from(settings.max_blocks)),
            state: Xxh64::new(SECTION_SEED),
            stage: Vec::new(),
            hashed: 0,
            len: 0,
            next_key_at: block.saturating_mul(next_anchor(0)),
            keys: Vec::new(),
            ends: Vec::new(),
        }
    }

    /// Bytes of the section so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The next bytes of the section's text.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        self.len = self.len.saturating_add(bytes.len() as u64);
        while !bytes.is_empty() && self.next_key_at <= self.cap {
            let room = usize::try_from(self.next_key_at - self.hashed).unwrap_or(usize::MAX);
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            // Straight into the hash state when nothing is staged and the piece is long
            // or reaches the next key; staged otherwise, so that the state is fed in
            // large updates whatever pieces the text comes in.
            if self.stage.is_empty() && (now.len() >= STAGE_BYTES || now.len() == room) {
                self.state.update(now);
            } else {
                self.stage.extend_from_slice(now);
                if self.stage.len() >= STAGE_BYTES {
                    self.flush();
                }
            }
            self.hashed += now.len() as u64;
            bytes = rest;
            if self.hashed == self.next_key_at {
                self.flush();
                let blocks = self.next_key_at / self.block;
                if self.keys.is_empty() {
                    // The dense keys at once: most prompts have at least a few.
                    self.keys.reserve(2 * DENSE_BLOCKS as usize);
                    self.ends.reserve(2 * DENSE_BLOCKS as usize);
                }
                self.keys.push(self.state.digest());
                self.ends.push(u32::try_from(blocks).unwrap_or(u32::MAX));
                self.next_key_at = next_anchor(blocks).saturating_mul(self.block);
            }
        }
    }

    fn flush(&mut self) {
        self.state.update(&self.stage);
        self.stage.clear();
    }

    /// The digest of all the section's text so far (bytes past the cap stay out: they
    /// are out of every key too).
    fn digest(&self) -> u64 {
        if self.stage.is_empty() {
            return self.state.digest();
        }
        let mut state = self.state.clone();
        state.update(&self.stage);
        state.digest()
    }
}

impl std::fmt::Debug for SectionHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SectionHasher").field("len", &self.len).field("keys", &self.keys.len()).finish()
    }
}

/// A prompt's three sections, hashed as their text arrives in any order.
#[derive(Debug, Clone)]
pub struct PromptHasher {
    pub tools: SectionHasher,
    pub messages: SectionHasher,
    pub prompt: SectionHasher,
    block: u64,
}

impl PromptHasher {
    pub fn new(settings: &PrefixSettings) -> Self {
        Self {
            tools: SectionHasher::new(settings),
            messages: SectionHasher::new(settings),
            prompt: SectionHasher::new(settings),
            block: u64::from(settings.block_chars.max(1)),
        }
    }

    /// Bytes of the prompt so far, in all sections.
    pub fn len(&self) -> u64 {
        self.tools.len.saturating_add(self.messages.len).saturating_add(self.prompt.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The keys of the text so far, the sections joined in the engine's order: tools,
    /// messages, prompt.
    pub fn hashes(&self) -> PromptHashes {
        let block = self.block;
        let sections = [&self.tools, &self.messages, &self.prompt];
        let count = sections.iter().map(|s| s.keys.len()).sum();
        let (mut keys, mut ends) = (Vec::with_capacity(count), Vec::with_capacity(count));
        let mut context = CONTEXT_SEED;
        let mut before: u64 = 0;
        for section in sections.into_iter().filter(|s| !s.is_empty()) {
            let offset = before / block;
            keys.extend(section.keys.iter().map(|&key| mix(key, context)));
            ends.extend(section.ends.iter().map(|&end| u32::try_from(offset + u64::from(end)).unwrap_or(u32::MAX)));
            let mut digest = [0u8; 16];
            digest[..8].copy_from_slice(&section.digest().to_le_bytes());
            digest[8..].copy_from_slice(&section.len.to_le_bytes());
            context = xxh64(&digest, context);
            before = before.saturating_add(section.len);
        }
        PromptHashes { keys, ends, blocks: u32::try_from(before / block).unwrap_or(u32::MAX) }
    }
}

/// A prompt's prefix keys before the model's salt, and where each ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromptHashes {
    keys: Vec<u64>,
    /// `ends[i]`: the prompt blocks key `i` stands for, increasing.
    ends: Vec<u32>,
    /// Full blocks in the whole prompt, keyed or not.
    blocks: u32,
}

impl PromptHashes {
    /// The keys of a prompt made of messages only (its text as the engine sees it).
    pub fn of_messages(text: &[u8], settings: &PrefixSettings) -> Self {
        let mut hasher = PromptHasher::new(settings);
        hasher.messages.feed(text);
        hasher.hashes()
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys as the model `model` with `adapter` caches this prompt.
    pub fn salted(&self, model: &str, adapter: Option<&str>) -> PrefixChain {
        let salt = xxh64(model.as_bytes(), xxh64(adapter.unwrap_or("").as_bytes(), 0x696e_6667));
        PrefixChain {
            keys: self.keys.iter().map(|&key| mix(key, salt)).collect(),
            ends: self.ends.clone(),
            blocks: self.blocks,
        }
    }
}

/// A prompt's prefix keys for one model and adapter: what the index records and
/// matches. Key `i` stands for the prompt's first `ends[i]` blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrefixChain {
    pub keys: Vec<u64>,
    pub ends: Vec<u32>,
    /// Full blocks in the whole prompt.
    pub blocks: u32,
}

impl PrefixChain {
    /// Blocks of the prompt the first `matched` keys stand for.
    pub fn blocks_through(&self, matched: usize) -> usize {
        matched.checked_sub(1).and_then(|i| self.ends.get(i)).map_or(0, |&end| end as usize)
    }

    /// How many keys stand for at most the first `blocks` blocks.
    pub fn keys_through(&self, blocks: usize) -> usize {
        self.ends.partition_point(|&end| end as usize <= blocks)
    }

    /// Blocks of the prompt its keys reach: its last key's end.
    pub fn keyed_blocks(&self) -> usize {
        self.ends.last().map_or(0, |&end| end as usize)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn settings(block_chars: u32, max_blocks: u32) -> PrefixSettings {
        PrefixSettings { block_chars, max_blocks, ..PrefixSettings::default() }
    }

    fn chain(text: &[u8]) -> PrefixChain {
        PromptHashes::of_messages(text, &settings(64, 1 << 20)).salted("m", None)
    }

    /// Keys in common from the start.
    fn common(a: &PrefixChain, b: &PrefixChain) -> usize {
        a.keys.iter().zip(&b.keys).take_while(|(x, y)| x == y).count()
    }

    #[test]
    fn salts_separate_models_and_adapters() {
        let text = [b'a'; 128];
        let hashes = PromptHashes::of_messages(&text, &settings(64, 256));
        let base = hashes.salted("m", None);
        assert_eq!(base.keys.len(), 2);
        assert_eq!(base.ends, [1, 2]);
        assert_ne!(base.keys, hashes.salted("m", Some("lora")).keys);
        assert_ne!(base.keys, hashes.salted("other", None).keys);
    }

    #[test]
    fn a_long_prompt_has_a_few_hundred_keys_ending_where_the_anchors_are() {
        let text = vec![b'x'; 4 << 20];
        let chain = chain(&text);
        assert_eq!(chain.keys.len(), 704);
        assert_eq!(chain.blocks, 65_536);
        assert_eq!(chain.ends.last(), Some(&65_536));
        assert!(chain.ends.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(chain.blocks_through(0), 0);
        assert_eq!(chain.blocks_through(130), 132);
    }

    #[test]
    fn the_cap_stops_hashing_not_counting() {
        let hashes = PromptHashes::of_messages(&[b'y'; 64 * 100], &settings(64, 10));
        assert_eq!((hashes.len(), hashes.blocks), (10, 100));
    }

    #[test]
    fn tools_anywhere_in_the_body_give_the_same_keys() {
        let s = settings(64, 1 << 20);
        let tools = vec![b't'; 5_000];
        let messages: Vec<u8> = (0..70_000u32).map(|i| b'a' + (i % 23) as u8).collect();
        let mut first = PromptHasher::new(&s);
        first.tools.feed(&tools);
        first.messages.feed(&messages);
        let mut last = PromptHasher::new(&s);
        for piece in messages.chunks(7) {
            last.messages.feed(piece);
        }
        last.tools.feed(&tools[..100]);
        last.tools.feed(&tools[100..]);
        let (first, last) = (first.hashes(), last.hashes());
        assert_eq!(first, last);
        assert_eq!(first.blocks as usize, (5_000 + 70_000) / 64);
        // The messages' keys depend on the tools before them.
        let bare = PromptHashes::of_messages(&messages, &s);
        let tool_keys = PromptHashes::of_messages(&tools, &s).len();
        assert_eq!(first.len(), tool_keys + bare.len());
        assert!(first.keys[tool_keys..].iter().zip(&bare.keys).all(|(a, b)| a != b));
        assert_eq!(first.ends[tool_keys], 5_000 / 64 + 1);
    }

    proptest! {
        #[test]
        fn a_shared_prefix_gives_shared_leading_keys(
            common_len in 0usize..40_000,
            tail_a in proptest::collection::vec(any::<u8>(), 1..3_000),
            tail_b in proptest::collection::vec(any::<u8>(), 1..3_000),
            cuts in proptest::collection::vec(1usize..5_000, 1..20),
        ) {
            let shared: Vec<u8> = (0..common_len).map(|i| (i * 7 % 251) as u8).collect();
            let a: Vec<u8> = shared.iter().chain(&tail_a).copied().collect();
            let b: Vec<u8> = shared.iter().chain(&tail_b).copied().collect();
            let (ca, cb) = (chain(&a), chain(&b));
            // Every key within the shared text is shared.
            let within = ca.ends.iter().take_while(|&&e| e as usize * 64 <= common_len).count();
            prop_assert!(common(&ca, &cb) >= within);
            if tail_a.first() != tail_b.first() {
                prop_assert_eq!(common(&ca, &cb), within, "keys past the divergence differ");
            }
            // Any cut of the text into pieces gives the same keys.
            let mut hasher = PromptHasher::new(&settings(64, 1 << 20));
            let mut rest = a.as_slice();
            // Every byte is fed: the cuts repeat until the text ends (each is at least 1).
            for cut in cuts.iter().cycle() {
                if rest.is_empty() { break; }
                let (now, later) = rest.split_at((*cut).min(rest.len()));
                hasher.messages.feed(now);
                rest = later;
            }
            prop_assert_eq!(hasher.hashes().salted("m", None), ca);
        }

        #[test]
        fn the_block_cap_is_respected(len in 0usize..40_000, cap in 1u32..300) {
            let hashes = PromptHashes::of_messages(&vec![b'x'; len], &settings(64, cap));
            prop_assert!(hashes.ends.last().is_none_or(|&end| end <= cap));
            prop_assert_eq!(hashes.blocks as usize, len / 64);
        }
    }
}
