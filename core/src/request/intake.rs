//! A request body as it arrives, chunk by chunk, whoever delivers it (the Envoy filter
//! or the ext_proc picker): checked against the size limit, scanned, and turned into a
//! decision: wait for more, route now (early, if the role routes before the body ends),
//! or parse the whole body when the scanner cannot answer. After an early decision the
//! rest is still checked as it passes, and the verdict comes with the last byte.

use super::{Checked, InferenceRequest, RequestScanner, ScanOutcome};
use crate::api_error::ApiError;
use crate::config::PrefixSettings;

/// What to do with the body so far.
#[derive(Debug)]
pub enum BodyEvent {
    /// Keep it: more is coming before a decision.
    Wait,
    /// Route now; `early` when the rest of the body is still to come.
    Decide { request: InferenceRequest, early: bool },
    /// The body is complete and the scanner cannot answer for it: parse it whole with
    /// [`parse_request`](super::parse_request), which also words any error.
    ParseWhole,
    /// Routed already: these bytes go on to the pod.
    Pass,
    /// Routed already and complete, valid JSON with one `model` in a shape the scanner
    /// does not follow: the engine checks the rest.
    PassUnverified,
}

pub struct BodyReader {
    scanner: RequestScanner,
    max_body_bytes: u64,
    /// The body's declared length, when the caller routes before the body ends.
    early_len: Option<usize>,
    /// The model of an early decision: the body now streams.
    routed_for: Option<String>,
    /// Some bytes could not be read: nothing more is scanned.
    broken: bool,
    seen: usize,
}

impl BodyReader {
    /// `prefix`: how the prompt is hashed; `early_len`: the declared body length, to
    /// route before the body ends (`None`: read it whole first).
    pub fn new(prefix: &PrefixSettings, max_body_bytes: u64, early_len: Option<usize>) -> Self {
        Self {
            scanner: RequestScanner::new(prefix),
            max_body_bytes,
            early_len,
            routed_for: None,
            broken: false,
            seen: 0,
        }
    }

    /// The body was routed before it ended.
    pub fn routed_early(&self) -> bool {
        self.routed_for.is_some()
    }

    /// Bytes received so far.
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// Whether the next bytes will be scanned: a caller may skip reading them if not.
    pub fn wants_bytes(&self) -> bool {
        let scanning = if self.routed_for.is_some() { !self.scanner.malformed() } else { !self.scanner.given_up() };
        scanning && !self.broken
    }

    /// The next `len` bytes of the body, as `bytes` (`None` if the caller could not, or
    /// did not, read them); `end`: they are its last.
    pub fn push(&mut self, len: usize, bytes: Option<&[u8]>, end: bool) -> Result<BodyEvent, ApiError> {
        self.seen = self.seen.saturating_add(len);
        if u64::try_from(self.seen).unwrap_or(u64::MAX) > self.max_body_bytes {
            return Err(ApiError::body_too_large(self.max_body_bytes));
        }
        if self.wants_bytes() {
            match bytes.filter(|b| b.len() == len) {
                Some(bytes) => self.scanner.feed(bytes),
                None => self.broken = true,
            }
        }
        if let Some(model) = self.routed_for.as_deref() {
            return self.after_decision(model.to_string(), end);
        }
        if !end {
            return self.early_decision();
        }
        let scanner = std::mem::replace(&mut self.scanner, RequestScanner::new(&PrefixSettings::default()));
        let saw_every_byte = !self.broken && scanner.fed() == self.seen;
        match scanner.finish() {
            ScanOutcome::Read(request) if saw_every_byte => Ok(BodyEvent::Decide { request: request?, early: false }),
            _ => Ok(BodyEvent::ParseWhole),
        }
    }

    /// Routes now if the caller routes early and the scanner has what routing reads.
    fn early_decision(&mut self) -> Result<BodyEvent, ApiError> {
        let Some(declared) = self.early_len.filter(|_| !self.broken) else { return Ok(BodyEvent::Wait) };
        let Some(read) = self.scanner.early_request(declared) else { return Ok(BodyEvent::Wait) };
        let request = read?;
        self.routed_for = Some(request.model.clone());
        Ok(BodyEvent::Decide { request, early: true })
    }

    /// A chunk of a body routed early: it passes; with the last one, the verdict.
    fn after_decision(&mut self, model: String, end: bool) -> Result<BodyEvent, ApiError> {
        if !end {
            return Ok(BodyEvent::Pass);
        }
        let scanner = std::mem::replace(&mut self.scanner, RequestScanner::new(&PrefixSettings::default()));
        match scanner.finish_routed(&model) {
            Checked::Valid if !self.broken => Ok(BodyEvent::Pass),
            Checked::Valid | Checked::Unverified => Ok(BodyEvent::PassUnverified),
            Checked::Refused(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(tail: &str) -> Vec<u8> {
        let text = "x".repeat(300);
        format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{text}"}}]{tail}}}"#).into_bytes()
    }

    /// Pushes `body` in 50-byte pieces; returns every event, or the refusal.
    /// Hashing reads the first 64 bytes of a prompt.
    fn prefix() -> PrefixSettings {
        PrefixSettings { block_chars: 16, max_blocks: 4, ..PrefixSettings::default() }
    }

    fn read(body: &[u8], early: bool, max: u64) -> Result<Vec<BodyEvent>, ApiError> {
        let mut reader = BodyReader::new(&prefix(), max, early.then_some(body.len()));
        let pieces: Vec<&[u8]> = body.chunks(50).collect();
        let mut events = Vec::new();
        for (i, piece) in pieces.iter().enumerate() {
            events.push(reader.push(piece.len(), Some(piece), i + 1 == pieces.len())?);
        }
        Ok(events)
    }

    #[test]
    fn a_body_is_decided_at_its_end_or_early_then_passed() {
        let whole = read(&long(""), false, 1 << 20).unwrap();
        assert!(whole[..whole.len() - 1].iter().all(|e| matches!(e, BodyEvent::Wait)));
        assert!(matches!(whole.last(), Some(BodyEvent::Decide { early: false, .. })));
        let early = read(&long(""), true, 1 << 20).unwrap();
        let decided = early.iter().position(|e| matches!(e, BodyEvent::Decide { early: true, .. })).unwrap();
        assert!(decided < 3, "decided at piece {decided}");
        assert!(early[decided + 1..].iter().all(|e| matches!(e, BodyEvent::Pass)));
    }

    #[test]
    fn an_odd_or_invalid_body_is_parsed_whole_or_refused_after_routing() {
        let odd = long(r#","model":"n""#);
        // Duplicate keys: the scanner leaves the body to serde when read whole...
        assert!(matches!(read(&odd, false, 1 << 20).unwrap().last(), Some(BodyEvent::ParseWhole)));
        // ...and, routed early, refuses the second `model` itself.
        assert_eq!(read(&odd, true, 1 << 20).unwrap_err().param, Some("model"));
        let shape = long(r#","messages":[["odd"]]"#);
        assert!(matches!(read(&shape, true, 1 << 20).unwrap().last(), Some(BodyEvent::PassUnverified)));
    }

    #[test]
    fn the_limit_holds_before_and_after_the_decision() {
        assert_eq!(read(&long(""), false, 100).unwrap_err().status, 413);
        assert_eq!(read(&long(""), true, 300).unwrap_err().status, 413);
    }

    #[test]
    fn bytes_that_could_not_be_read_are_never_guessed() {
        let body = long("");
        let mut reader = BodyReader::new(&prefix(), 1 << 20, None);
        assert!(matches!(reader.push(10, None, false), Ok(BodyEvent::Wait)));
        assert!(!reader.wants_bytes());
        assert!(matches!(reader.push(body.len() - 10, None, true), Ok(BodyEvent::ParseWhole)));
    }
}
