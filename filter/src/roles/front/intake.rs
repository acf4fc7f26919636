//! The pieces of a client-facing request before the decision: refuse with an
//! OpenAI-shaped error, read the headers once and remove those only the gateway may
//! set, classify the request, and read the body within its limit.

use infergate_core::ApiError;
use infergate_core::flow::Refusal;
use infergate_core::request::{ApiEndpoint, InferenceRequest, RequestScanner, ScanOutcome, classify, parse_request};
use infergate_core::wire::header::{self, RESERVED_PREFIXES};

use crate::host::Host;
use crate::metrics::Metric;

/// Answers the client with `error`.
pub fn reply_error(host: &dyn Host, error: &ApiError) {
    let retry_after = error.retry_after_s.map(|s| s.to_string());
    let mut headers = vec![("content-type", "application/json")];
    if let Some(seconds) = retry_after.as_deref() {
        headers.push(("retry-after", seconds));
    }
    if let Some(reason) = Refusal::reason_of(error) {
        headers.push((header::QUEUE_REASON, reason));
    }
    host.reply(u32::from(error.status), &headers, &error.body());
}

/// The request's headers, read from the host once: every lookup a role makes on the
/// headers path is then local, which saves a host call per header.
pub struct RequestHeaders(Vec<(String, Vec<u8>)>);

impl RequestHeaders {
    pub fn read(host: &dyn Host) -> Self {
        Self(host.request_headers())
    }

    /// A header as text; invalid UTF-8 reads as absent.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
    }

    /// Removes the client's copies of the headers only the gateway may set.
    pub fn strip_reserved(&self, host: &dyn Host) {
        for (name, _) in &self.0 {
            let lower = name.to_ascii_lowercase();
            if RESERVED_PREFIXES.iter().any(|p| lower.starts_with(p)) {
                let _ = host.set_request_header(name, None);
            }
        }
    }
}

/// What to do once the request headers are in.
pub enum Intake {
    /// `GET /v1/models`: the role answers it.
    ListModels,
    /// An inference request: wait for its body.
    AwaitBody,
}

pub fn on_headers(headers: &RequestHeaders, end_of_stream: bool, max_body_bytes: u64) -> Result<Intake, ApiError> {
    let path = headers.get(":path").unwrap_or_default();
    match classify(headers.get(":method").unwrap_or_default(), path) {
        ApiEndpoint::ListModels => Ok(Intake::ListModels),
        ApiEndpoint::Unknown => Err(ApiError::not_found_path(path)),
        ApiEndpoint::Inference => {
            let declared = headers.get("content-length").and_then(|v| v.parse::<u64>().ok());
            if declared.is_some_and(|len| len > max_body_bytes) {
                return Err(ApiError::body_too_large(max_body_bytes));
            }
            if end_of_stream {
                return Err(ApiError::invalid_request(
                    "invalid_body",
                    None,
                    "The request has no body; send a JSON object with a `model` field.",
                ));
            }
            Ok(Intake::AwaitBody)
        }
    }
}

/// Reads a request body as Envoy buffers it: each callback copies only the bytes that
/// arrived since the last one into the scanner, so the body is never held in the VM.
/// A body the scanner does not follow is read whole at the end and parsed with serde.
pub struct BodyIntake {
    scanner: RequestScanner,
    /// The host handed over fewer bytes than it announced; scan no further.
    scan_broken: bool,
    full_parses: Metric,
}

impl BodyIntake {
    /// `prompt_cap`: prompt bytes to keep for prefix hashing; `full_parses` counts the
    /// bodies parsed whole.
    pub fn new(prompt_cap: usize, full_parses: Metric) -> Self {
        Self { scanner: RequestScanner::new(prompt_cap), scan_broken: false, full_parses }
    }

    /// The request once the whole body is in, `None` while more is coming.
    pub fn on_body(
        &mut self,
        host: &dyn Host,
        body_size: usize,
        end_of_stream: bool,
        max_body_bytes: u64,
    ) -> Result<Option<InferenceRequest>, ApiError> {
        if u64::try_from(body_size).unwrap_or(u64::MAX) > max_body_bytes {
            return Err(ApiError::body_too_large(max_body_bytes));
        }
        let fed = self.scanner.fed();
        if !self.scan_broken && !self.scanner.given_up() && body_size > fed {
            let wanted = body_size - fed;
            match host.request_body(fed, wanted) {
                Some(bytes) if bytes.len() == wanted => self.scanner.feed(&bytes),
                _ => self.scan_broken = true,
            }
        }
        if !end_of_stream {
            return Ok(None);
        }
        let scanner = std::mem::replace(&mut self.scanner, RequestScanner::new(0));
        let saw_every_byte = !self.scan_broken && scanner.fed() == body_size;
        match scanner.finish() {
            ScanOutcome::Read(request) if saw_every_byte => request.map(Some),
            _ => {
                self.full_parses.increment();
                parse_request(&host.request_body(0, body_size).unwrap_or_default()).map(Some)
            }
        }
    }
}
