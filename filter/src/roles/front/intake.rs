//! The pieces of a client-facing request before the decision: refuse with an
//! OpenAI-shaped error, read the headers once and remove those only the gateway may
//! set, classify the request, and read the body within its limit.

use infergate_core::ApiError;
use infergate_core::config::PrefixSettings;
use infergate_core::flow::Refusal;
use infergate_core::request::{ApiEndpoint, BodyEvent, BodyReader, InferenceRequest, classify, parse_request};
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
/// arrived since the last one into core's [`BodyReader`], so the body is never held in
/// the VM. A body the scanner does not follow is read whole at the end and parsed with
/// serde.
///
/// With early routing, the decision comes as soon as `model` and the prompt's hashed
/// bytes are in, if the body declared its length (which stands in for the prompt's);
/// the rest then streams to the pod as it arrives, each chunk still checked, and a
/// body that turns out invalid is answered with a 400 before its last byte leaves.
pub struct BodyIntake {
    reader: BodyReader,
    prefix: PrefixSettings,
    full_parses: Metric,
    early: Option<EarlyRouting>,
    /// Bytes of the host's buffer already read: the buffer grows while the body is
    /// paused and holds only the newest chunk once it streams.
    buffer_read: usize,
}

impl BodyIntake {
    /// `prefix`: how the prompt is hashed; `full_parses` counts the bodies parsed whole;
    /// `early`: the declared length and stats, to route early.
    pub fn new(
        prefix: PrefixSettings,
        max_body_bytes: u64,
        full_parses: Metric,
        early: Option<(usize, EarlyRouting)>,
    ) -> Self {
        let (early_len, early) = early.map_or((None, None), |(len, stats)| (Some(len), Some(stats)));
        let reader = BodyReader::new(&prefix, max_body_bytes, early_len);
        Self { reader, prefix, full_parses, early, buffer_read: 0 }
    }

    /// The chunks so far went on upstream: the host's buffer starts empty again.
    pub fn passed(&mut self) {
        self.buffer_read = 0;
    }

    pub fn on_body(&mut self, host: &dyn Host, body_size: usize, end_of_stream: bool) -> Result<BodyStep, ApiError> {
        let new = body_size.saturating_sub(self.buffer_read);
        let bytes = match new {
            0 => Some(Vec::new()),
            _ if self.reader.wants_bytes() => host.request_body(self.buffer_read, new),
            _ => None,
        };
        self.buffer_read = body_size;
        let routed_early = self.reader.routed_early();
        let event = self.reader.push(new, bytes.as_deref(), end_of_stream).inspect_err(|_| {
            if routed_early {
                self.count(|e| &e.refused);
            }
        })?;
        Ok(match event {
            BodyEvent::Wait => BodyStep::Wait,
            BodyEvent::Decide { request, early } => {
                if early {
                    self.count(|e| &e.routed);
                }
                BodyStep::Decide { request, early }
            }
            BodyEvent::ParseWhole => {
                self.full_parses.increment();
                let request = parse_request(&host.request_body(0, body_size).unwrap_or_default(), &self.prefix)?;
                BodyStep::Decide { request, early: false }
            }
            BodyEvent::Pass => BodyStep::Pass,
            BodyEvent::PassUnverified => {
                self.count(|e| &e.unverified);
                BodyStep::Pass
            }
        })
    }

    fn count(&self, metric: impl FnOnce(&EarlyRouting) -> &Metric) {
        if let Some(early) = &self.early {
            metric(early).increment();
        }
    }
}
