//! Reads a request body as its chunks arrive, without building a tree: it checks the
//! whole body (UTF-8 and JSON grammar), keeps the raw JSON of the few small fields
//! routing reads, and renders the prompt as it streams, keeping only the bytes prefix
//! hashing can use. A 1 MiB prompt is therefore looked at once and never held.
//!
//! It answers exactly what [`parse_request`](super::parse_request) answers for the
//! bodies it follows (a test and a fuzz target hold it to that); for any other body,
//! including every invalid one, it says so, and the caller parses the whole body with
//! `parse_request`, which also words the error. Nothing passes unchecked either way.

mod capped;
mod extract;
mod lexer;
mod utf8;

use super::InferenceRequest;
use crate::api_error::ApiError;

/// The scanner cannot follow this body (an unusual shape, or invalid JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsupported;

/// What the scanner made of a complete body.
#[derive(Debug)]
pub enum ScanOutcome {
    /// The request, or the refusal `parse_request` would give it.
    Read(Result<InferenceRequest, ApiError>),
    /// Parse the whole body with `parse_request`.
    NeedsFullParse,
}

pub struct RequestScanner {
    lexer: lexer::Lexer,
    utf8: utf8::Utf8Check,
    extract: extract::Extract,
    given_up: bool,
    fed: usize,
}

impl RequestScanner {
    /// `prompt_cap`: how many bytes of the prompt to keep, `block_chars × max_blocks`.
    pub fn new(prompt_cap: usize) -> Self {
        Self {
            lexer: lexer::Lexer::new(),
            utf8: utf8::Utf8Check::default(),
            extract: extract::Extract::new(prompt_cap),
            given_up: false,
            fed: 0,
        }
    }

    /// Reads the next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        self.fed = self.fed.saturating_add(chunk.len());
        if self.given_up {
            return;
        }
        let read = self.utf8.feed(chunk).and_then(|()| self.lexer.feed(chunk, &mut self.extract));
        self.given_up = read.is_err();
    }

    /// Bytes fed so far.
    pub fn fed(&self) -> usize {
        self.fed
    }

    /// True once the body is known to need `parse_request`; feeding more is wasted.
    pub fn given_up(&self) -> bool {
        self.given_up
    }

    /// The body is complete.
    pub fn finish(self) -> ScanOutcome {
        if self.given_up || !self.lexer.complete() || !self.utf8.complete() {
            return ScanOutcome::NeedsFullParse;
        }
        match self.extract.into_request() {
            Ok(read) => ScanOutcome::Read(read),
            Err(Unsupported) => ScanOutcome::NeedsFullParse,
        }
    }
}

#[cfg(test)]
mod tests;
