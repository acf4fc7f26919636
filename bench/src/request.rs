//! A benchmark request: the prompt bytes the chat template would give (the router and
//! the engine see the same bytes), its output length, and when it arrives.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// When a request arrives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// At a fixed time (open loop).
    At(f64),
    /// `think_s` after the answer to request `previous` finished (a conversation's next
    /// turn, closed loop).
    After { previous: usize, think_s: f64 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct BenchRequest {
    pub arrival: Arrival,
    /// The served model name; adapters are models of their own.
    pub model: String,
    pub adapter: Option<String>,
    pub prompt: Prompt,
    pub output_tokens: u32,
    /// The agent session it is a call of, where a turn chain plays several sessions
    /// one after the other (`agentic`'s users); `None`: the chain is one session.
    pub session: Option<u64>,
}

/// A request's prompt: its bytes, or, for prompts of hundreds of kilobytes that share
/// most of their text, blocks of a shared library put together each time it is read.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Text(Vec<u8>),
    Blocks(BlockPrompt),
}

impl From<Vec<u8>> for Prompt {
    fn from(bytes: Vec<u8>) -> Self {
        Prompt::Text(bytes)
    }
}

impl Prompt {
    /// The prompt's bytes, as the router and the engine read them.
    pub fn bytes(&self) -> Cow<'_, [u8]> {
        match self {
            Prompt::Text(bytes) => Cow::Borrowed(bytes),
            Prompt::Blocks(blocks) => Cow::Owned(blocks.bytes()),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Prompt::Text(bytes) => bytes.len(),
            Prompt::Blocks(blocks) => blocks.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Texts of a fixed size, each named by a key: the blocks prompts are made of.
#[derive(Debug, Default)]
pub struct BlockLibrary {
    block_bytes: usize,
    texts: HashMap<u64, Box<[u8]>>,
}

impl BlockLibrary {
    pub fn new(block_bytes: usize) -> Self {
        Self { block_bytes, texts: HashMap::new() }
    }

    /// The text of `key`, made from the key alone the first time (lowercase words).
    pub fn add(&mut self, key: u64) {
        let size = self.block_bytes;
        self.texts.entry(key).or_insert_with(|| text(&mut fastrand::Rng::with_seed(key), size).into_bytes().into());
    }

    pub fn block_bytes(&self) -> usize {
        self.block_bytes
    }

    /// Distinct blocks held.
    pub fn blocks(&self) -> usize {
        self.texts.len()
    }
}

/// `len` bytes: `header`, then the library's blocks for `keys` in order (the header
/// takes the first bytes of the first block), then text of its own from `filler_seed`.
#[derive(Debug, Clone)]
pub struct BlockPrompt {
    pub library: Arc<BlockLibrary>,
    pub header: Vec<u8>,
    pub keys: Vec<u64>,
    pub len: usize,
    pub filler_seed: u64,
}

impl PartialEq for BlockPrompt {
    fn eq(&self, other: &Self) -> bool {
        (&self.header, &self.keys, self.len, self.filler_seed)
            == (&other.header, &other.keys, other.len, other.filler_seed)
    }
}

impl BlockPrompt {
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        out.extend_from_slice(&self.header[..self.header.len().min(self.len)]);
        let block = self.library.block_bytes.max(1);
        for (i, key) in self.keys.iter().enumerate() {
            let (start, end) = (i * block, ((i + 1) * block).min(self.len));
            if out.len() >= end {
                continue;
            }
            let text = self.library.texts.get(key).map_or(&[][..], |t| &t[..]);
            let from = out.len() - start;
            out.extend_from_slice(text.get(from..end - start).unwrap_or_default());
        }
        if out.len() < self.len {
            let filler = text(&mut fastrand::Rng::with_seed(self.filler_seed), self.len - out.len());
            out.extend_from_slice(filler.as_bytes());
        }
        out
    }
}

/// Deterministic filler text: `chars` lowercase letters and spaces from `rng`.
pub fn text(rng: &mut fastrand::Rng, chars: usize) -> String {
    let mut out = String::with_capacity(chars);
    while out.len() < chars {
        let word = rng.usize(2..9);
        for _ in 0..word.min(chars - out.len()) {
            out.push(rng.lowercase());
        }
        if out.len() < chars {
            out.push(' ');
        }
    }
    out
}

/// The answer text the simulated engine "generates": the next turn includes it.
pub fn answer(tokens: u32) -> String {
    "tok ".repeat(tokens as usize)
}

/// Renders a conversation as the gateway does: `<|role|>content` per message.
pub fn render(messages: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (role, content) in messages {
        out.extend_from_slice(b"<|");
        out.extend_from_slice(role.as_bytes());
        out.extend_from_slice(b"|>");
        out.extend_from_slice(content.as_bytes());
    }
    out
}
