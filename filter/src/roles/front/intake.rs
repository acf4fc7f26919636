//! The pieces of a client-facing request before the decision: refuse with an
//! OpenAI-shaped error, read the headers once and remove those only the gateway may
//! set, classify the request, and read the body within its limit.

use infergate_core::ApiError;
use infergate_core::flow::Refusal;
use infergate_core::request::{
    ApiEndpoint, Checked, InferenceRequest, RequestScanner, ScanOutcome, classify, parse_request,
};
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

/// The stats of routing before the body ends, summed over workers.
#[derive(Clone)]
pub struct EarlyRouting {
    /// Requests routed before their body ended.
    pub routed: Metric,
    /// Bodies found invalid after their early decision: the gateway answered 400 and
    /// the pod never received a complete body.
    pub refused: Metric,
    /// Valid JSON with one `model`, of a shape the scanner does not follow: the engine
    /// checked the rest.
    pub unverified: Metric,
}

/// What the stream does with the body so far.
pub enum BodyStep {
    /// Keep it paused: more is coming before a decision.
    Wait,
    /// Decide now; `early` when the rest of the body is still to come.
    Decide { request: InferenceRequest, early: bool },
    /// Routed already: this chunk goes on to the pod.
    Pass,
}

/// Reads a request body as Envoy buffers it: each callback copies only the bytes that
/// arrived since the last one into the scanner, so the body is never held in the VM.
/// A body the scanner does not follow is read whole at the end and parsed with serde.
///
/// With early routing, the decision comes as soon as `model` and the prompt's hashed
/// bytes are in, if the body declared its length (which stands in for the prompt's);
/// the rest then streams to the pod as it arrives, each chunk still checked, and a
/// body that turns out invalid is answered with a 400 before its last byte leaves.
pub struct BodyIntake {
    scanner: RequestScanner,
    /// The host handed over fewer bytes than it announced; scan no further.
    scan_broken: bool,
    full_parses: Metric,
    /// The declared body length, when the role routes early.
    early: Option<(usize, EarlyRouting)>,
    /// The model of an early decision: the body now streams.
    routed_for: Option<String>,
    /// Bytes of the host's buffer already fed: the buffer grows while the body is
    /// paused and holds only the newest chunk once it streams.
    buffer_fed: usize,
}

impl BodyIntake {
    /// `prompt_cap`: prompt bytes to keep for prefix hashing; `full_parses` counts the
    /// bodies parsed whole; `early`: the declared length and stats, to route early.
    pub fn new(prompt_cap: usize, full_parses: Metric, early: Option<(usize, EarlyRouting)>) -> Self {
        Self {
            scanner: RequestScanner::new(prompt_cap),
            scan_broken: false,
            full_parses,
            early,
            routed_for: None,
            buffer_fed: 0,
        }
    }

    /// The chunks so far went on upstream: the host's buffer starts empty again.
    pub fn passed(&mut self) {
        self.buffer_fed = 0;
    }

    /// Feeds the bytes of the host's buffer not fed yet.
    fn feed_new(&mut self, host: &dyn Host, body_size: usize) {
        if self.scan_broken || body_size <= self.buffer_fed {
            return;
        }
        let wanted = body_size - self.buffer_fed;
        match host.request_body(self.buffer_fed, wanted) {
            Some(bytes) if bytes.len() == wanted => self.scanner.feed(&bytes),
            _ => self.scan_broken = true,
        }
        self.buffer_fed = body_size;
    }

    pub fn on_body(
        &mut self,
        host: &dyn Host,
        body_size: usize,
        end_of_stream: bool,
        max_body_bytes: u64,
    ) -> Result<BodyStep, ApiError> {
        if self.routed_for.is_some() {
            return self.on_routed_body(host, body_size, end_of_stream, max_body_bytes);
        }
        if u64::try_from(body_size).unwrap_or(u64::MAX) > max_body_bytes {
            return Err(ApiError::body_too_large(max_body_bytes));
        }
        if !self.scanner.given_up() {
            self.feed_new(host, body_size);
        }
        if !end_of_stream {
            return self.early_decision();
        }
        let scanner = std::mem::replace(&mut self.scanner, RequestScanner::new(0));
        let saw_every_byte = !self.scan_broken && scanner.fed() == body_size;
        let request = match scanner.finish() {
            ScanOutcome::Read(request) if saw_every_byte => request?,
            _ => {
                self.full_parses.increment();
                parse_request(&host.request_body(0, body_size).unwrap_or_default())?
            }
        };
        Ok(BodyStep::Decide { request, early: false })
    }

    /// Routes now if the role routes early and the scanner has what routing reads.
    fn early_decision(&mut self) -> Result<BodyStep, ApiError> {
        let Some((declared, early)) = self.early.as_ref().filter(|_| !self.scan_broken) else {
            return Ok(BodyStep::Wait);
        };
        let Some(read) = self.scanner.early_request(*declared) else { return Ok(BodyStep::Wait) };
        let request = read?;
        early.routed.increment();
        self.routed_for = Some(request.model.clone());
        Ok(BodyStep::Decide { request, early: true })
    }

    /// A chunk of a body routed early: checked as it passes; at the end, the verdict.
    fn on_routed_body(
        &mut self,
        host: &dyn Host,
        body_size: usize,
        end_of_stream: bool,
        max_body_bytes: u64,
    ) -> Result<BodyStep, ApiError> {
        if !self.scanner.malformed() {
            self.feed_new(host, body_size);
        } else {
            self.buffer_fed = body_size;
        }
        let seen = self.scanner.fed().max(self.buffer_fed);
        if u64::try_from(seen).unwrap_or(u64::MAX) > max_body_bytes {
            self.count(|e| &e.refused);
            return Err(ApiError::body_too_large(max_body_bytes));
        }
        if !end_of_stream {
            return Ok(BodyStep::Pass);
        }
        let scanner = std::mem::replace(&mut self.scanner, RequestScanner::new(0));
        let model = self.routed_for.as_deref().unwrap_or_default();
        match scanner.finish_routed(model) {
            Checked::Valid if !self.scan_broken => Ok(BodyStep::Pass),
            Checked::Valid | Checked::Unverified => {
                self.count(|e| &e.unverified);
                Ok(BodyStep::Pass)
            }
            Checked::Refused(error) => {
                self.count(|e| &e.refused);
                Err(error)
            }
        }
    }

    fn count(&self, metric: impl FnOnce(&EarlyRouting) -> &Metric) {
        if let Some((_, early)) = &self.early {
            metric(early).increment();
        }
    }
}
