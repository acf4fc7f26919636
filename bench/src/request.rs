//! A benchmark request: the prompt bytes the chat template would give (the router and
//! the engine see the same bytes), its output length, and when it arrives.

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
    pub prompt: Vec<u8>,
    pub output_tokens: u32,
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
