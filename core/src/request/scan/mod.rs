//! Reads a request body as its chunks arrive, without building a tree: it checks the
//! whole body (UTF-8 and JSON grammar), keeps the raw JSON of the few small fields
//! routing reads, and renders the prompt as it streams into its prefix hashing. A
//! 1 MiB prompt is therefore looked at once and never held.
//!
//! It answers exactly what [`parse_request`](super::parse_request) answers for the
//! bodies it follows (a test and a fuzz target hold it to that); for any other body,
//! including every invalid one, it says so, and the caller parses the whole body with
//! `parse_request`, which also words the error. Nothing passes unchecked either way.

mod extract;
mod lexer;
mod utf8;

use super::{InferenceRequest, typed_fields};
use crate::api_error::ApiError;
use crate::config::PrefixSettings;

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

/// What the scanner made of a body that was routed before it ended, and so cannot be
/// parsed whole: the body went on to the pod as it came.
#[derive(Debug)]
pub enum Checked {
    /// The body is one `parse_request` accepts, for the model it was routed for.
    Valid,
    /// A body `parse_request` would refuse, with the refusal to answer.
    Refused(ApiError),
    /// Valid JSON with one `model`, in a shape the scanner does not follow (an escaped
    /// key, content after tool calls, a long non-text content): the engine checks it.
    Unverified,
}

/// Where the JSON grammar or UTF-8 broke: in the chunk that held these bytes.
#[derive(Debug, Clone, Copy)]
struct Malformed {
    utf8: bool,
    from: usize,
    to: usize,
}

pub struct RequestScanner {
    lexer: lexer::Lexer,
    utf8: utf8::Utf8Check,
    extract: extract::Extract,
    malformed: Option<Malformed>,
    /// The extract still follows the body's shape; the grammar is checked either way.
    follows: bool,
    /// Top-level keys that decode to `model`, whatever the shape.
    model_keys: u8,
    fed: usize,
}

/// Passes the lexer's events to the extract while it follows the body, and counts the
/// top-level `model` keys to the end: a second one, after an early decision, would
/// name another model than the one routed for.
struct Watch<'a> {
    extract: &'a mut extract::Extract,
    follows: &'a mut bool,
    model_keys: &'a mut u8,
}

impl Watch<'_> {
    fn step<T: Default>(&mut self, event: impl FnOnce(&mut extract::Extract) -> Result<T, Unsupported>) -> T {
        if !*self.follows {
            return T::default();
        }
        event(self.extract).unwrap_or_else(|Unsupported| {
            *self.follows = false;
            T::default()
        })
    }
}

impl lexer::Listener for Watch<'_> {
    fn value_start(&mut self, level: usize, first: u8, at: usize) -> Result<bool, Unsupported> {
        Ok(self.step(|e| e.value_start(level, first, at)))
    }

    fn value_end(&mut self, level: usize, chunk: &[u8], end: usize) -> Result<(), Unsupported> {
        self.step(|e| e.value_end(level, chunk, end));
        Ok(())
    }

    fn key(&mut self, level: usize, name: &[u8], escaped: bool) -> Result<(), Unsupported> {
        if level == 1 && name == b"model" {
            *self.model_keys = self.model_keys.saturating_add(1);
        }
        self.step(|e| e.key(level, name, escaped));
        Ok(())
    }

    fn text(&mut self, piece: &[u8]) {
        if *self.follows {
            self.extract.text(piece);
            if self.extract.overflowed() {
                *self.follows = false;
            }
        }
    }

    fn chunk_end(&mut self, chunk: &[u8]) -> Result<(), Unsupported> {
        self.step(|e| e.chunk_end(chunk));
        Ok(())
    }
}

impl RequestScanner {
    /// `prefix`: how the prompt is hashed for prefix matching.
    pub fn new(prefix: &PrefixSettings) -> Self {
        Self {
            lexer: lexer::Lexer::new(),
            utf8: utf8::Utf8Check::default(),
            extract: extract::Extract::new(prefix),
            malformed: None,
            follows: true,
            model_keys: 0,
            fed: 0,
        }
    }

    /// Reads the next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        let from = self.fed;
        self.fed = self.fed.saturating_add(chunk.len());
        if self.malformed.is_some() {
            return;
        }
        let utf8 = self.utf8.feed(chunk).is_err();
        let mut watch =
            Watch { extract: &mut self.extract, follows: &mut self.follows, model_keys: &mut self.model_keys };
        if utf8 || self.lexer.feed(chunk, &mut watch).is_err() {
            self.malformed = Some(Malformed { utf8, from, to: self.fed });
        }
    }

    /// Bytes fed so far.
    pub fn fed(&self) -> usize {
        self.fed
    }

    /// True once the body is known to need `parse_request`; feeding more is wasted
    /// unless the body was routed before it ended ([`RequestScanner::malformed`]).
    pub fn given_up(&self) -> bool {
        self.malformed.is_some() || !self.follows
    }

    /// True once the body is known to be invalid JSON or UTF-8.
    pub fn malformed(&self) -> bool {
        self.malformed.is_some()
    }

    /// The request as routing needs it, before the body ends: once `model` is read and
    /// the prompt holds every byte prefix hashing reads. `body_len`, the declared
    /// length of the whole body, stands in for the prompt's length. A body that puts
    /// `tools` after its messages is routed on its messages alone.
    pub fn early_request(&self, body_len: usize) -> Option<Result<InferenceRequest, ApiError>> {
        if self.given_up() || self.model_keys > 1 {
            return None;
        }
        self.extract.early(body_len)
    }

    /// The body is complete.
    pub fn finish(self) -> ScanOutcome {
        if self.given_up() || !self.lexer.complete() || !self.utf8.complete() {
            return ScanOutcome::NeedsFullParse;
        }
        match self.extract.complete_request() {
            Ok(read) => ScanOutcome::Read(read),
            Err(Unsupported) => ScanOutcome::NeedsFullParse,
        }
    }

    /// The body routed for `model` before it ended is complete: checks it as
    /// `parse_request` would have, as far as the scanner can without the whole body.
    pub fn finish_routed(self, model: &str) -> Checked {
        let invalid = |message: String| Checked::Refused(ApiError::invalid_request("invalid_json", None, message));
        if let Some(Malformed { utf8, from, to }) = self.malformed {
            let what = if utf8 { "valid UTF-8" } else { "valid JSON" };
            return invalid(format!("The request body is not {what}: the error is within bytes {from} to {to}."));
        }
        if !self.lexer.complete() || !self.utf8.complete() {
            return invalid(format!("The request body ended, after {} bytes, before its JSON did.", self.fed));
        }
        if self.model_keys > 1 {
            if let Some(error) = typed_fields::duplicate("model") {
                return Checked::Refused(error);
            }
        }
        if !self.follows {
            return Checked::Unverified;
        }
        match self.extract.complete_request() {
            Ok(Ok(request)) if request.model == model => Checked::Valid,
            Ok(Ok(request)) => Checked::Refused(ApiError::invalid_request(
                "invalid_model",
                Some("model"),
                format!("The body names `{}` where it was routed for `{model}`.", request.model),
            )),
            Ok(Err(refused)) => Checked::Refused(refused),
            Err(Unsupported) => self.extract.field_error().map_or(Checked::Unverified, Checked::Refused),
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod routed_tests;
