//! The steps the two client-facing roles (router and global) both take, once: read
//! the role's own client headers, strip the reserved ones, answer `GET /v1/models`,
//! read the body within its limit, let the role decide, and refuse with an
//! OpenAI-shaped error on any failure; then, on the way back, add the decision's
//! explanation. The roles fill in what differs through `FrontRole`.

pub mod intake;

use infergate_core::ApiError;
use infergate_core::config::PrefixSettings;
use infergate_core::endpoint::Endpoint;
use infergate_core::request::InferenceRequest;
use infergate_core::wire::header;

use crate::host::Host;
use crate::host::events::{Flow, StreamEvents};
use crate::metrics::Metric;
use intake::{BodyIntake, BodyStep, EarlyRouting, Intake, RequestHeaders};

/// What a client-facing role does for one request.
pub trait FrontRole {
    fn host(&self) -> &dyn Host;
    fn max_body_bytes(&self) -> u64;
    /// How the body intake hashes the prompt for prefix matching.
    fn prefix_settings(&self) -> PrefixSettings;
    /// Counts the bodies parsed whole.
    fn full_parses(&self) -> &Metric;
    /// The stats of routing before the body ends, if the role does.
    fn early_routing(&self) -> Option<EarlyRouting> {
        None
    }
    /// Reads the client headers the role honours, before the reserved ones go.
    fn read_client_headers(&mut self, headers: &RequestHeaders) -> Result<(), ApiError>;
    /// The `GET /v1/models` body.
    fn model_list(&self) -> Result<Vec<u8>, ApiError>;
    /// Decides where the request goes and sets the routing headers, or holds it in the
    /// gateway queue (the stream stays paused until the role resumes or answers it).
    /// `early`: the body is still arriving, so the request cannot be held.
    fn route(&mut self, request: InferenceRequest, early: bool) -> Result<Admitted, ApiError>;
    /// Counts a refusal in the role's metrics.
    fn count_rejection(&self, error: &ApiError);
    /// The decision, explained, if the role adds it to the response.
    fn explanation(&self) -> Option<String>;
    /// A request routed with [`Admitted::RoutedWholeBody`] has its whole body
    /// (`body_size` bytes) in Envoy's buffer: `Continue` sends it on, `Pause` holds it
    /// until the role resumes it.
    fn on_whole_body(&mut self, _body_size: usize) -> Flow {
        Flow::Continue
    }
    /// The answer to an HTTP call the role made from this stream.
    fn on_http_call_response(&mut self, _token: u32, _num_headers: usize, _body_size: usize) {}
    /// The upstream's response headers are in: whether the role holds this response,
    /// to answer in its place or let it on later (it then sees no more of it here).
    fn holds_response(&mut self) -> bool {
        false
    }
    fn on_response_headers(&mut self, end_of_stream: bool);
    fn on_response_body(&mut self, _body_size: usize, _end_of_stream: bool) -> Flow {
        Flow::Continue
    }
    fn on_log(&mut self);
}

/// What a role did with a request it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// Routed: the request goes on upstream.
    Routed,
    /// Routed, but the role needs the whole body before the request goes on (it sends
    /// a prefill leg first): the stream holds the body to its end, then asks the role
    /// ([`FrontRole::on_whole_body`]).
    RoutedWholeBody,
    /// Held in the gateway queue.
    Held,
}

/// A client-facing stream: the shared steps around one role's request.
pub struct FrontStream<R> {
    role: R,
    body: Option<BodyIntake>,
    /// The body's `content-length`, when it declared one.
    declared_len: Option<usize>,
    /// Routed before the body ended, by a role that needs the whole body: the rest is
    /// held until the end.
    holding_to_end: bool,
}

impl<R: FrontRole> FrontStream<R> {
    pub fn new(role: R) -> Self {
        Self { role, body: None, declared_len: None, holding_to_end: false }
    }

    fn reject(&self, error: &ApiError) -> Flow {
        self.role.count_rejection(error);
        intake::reply_error(self.role.host(), error);
        Flow::Pause
    }
}

impl<R: FrontRole> StreamEvents for FrontStream<R> {
    fn on_request_headers(&mut self, end_of_stream: bool) -> Flow {
        let headers = RequestHeaders::read(self.role.host());
        if let Err(error) = self.role.read_client_headers(&headers) {
            return self.reject(&error);
        }
        headers.strip_reserved(self.role.host());
        self.declared_len = headers.get("content-length").and_then(|v| v.parse().ok());
        match intake::on_headers(&headers, end_of_stream, self.role.max_body_bytes()) {
            Ok(Intake::ListModels) => match self.role.model_list() {
                Ok(body) => {
                    self.role.host().reply(200, &[("content-type", "application/json")], &body);
                    Flow::Pause
                }
                Err(error) => self.reject(&error),
            },
            Ok(Intake::AwaitBody) => Flow::Pause,
            Err(error) => self.reject(&error),
        }
    }

    fn on_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Flow {
        let role = &self.role;
        let declared_len = self.declared_len;
        let body = self.body.get_or_insert_with(|| {
            let early = declared_len.zip(role.early_routing());
            BodyIntake::new(role.prefix_settings(), role.max_body_bytes(), role.full_parses().clone(), early)
        });
        let (request, early) = match body.on_body(role.host(), body_size, end_of_stream) {
            Ok(BodyStep::Wait) => return Flow::Pause,
            Ok(BodyStep::Pass) if self.holding_to_end => {
                return if end_of_stream { self.role.on_whole_body(body_size) } else { Flow::Pause };
            }
            Ok(BodyStep::Pass) => {
                body.passed();
                return Flow::Continue;
            }
            Ok(BodyStep::Decide { request, early }) => (request, early),
            Err(error) => return self.reject(&error),
        };
        match self.role.route(request, early) {
            Ok(Admitted::Routed) => {
                if let Some(body) = self.body.as_mut() {
                    body.passed();
                }
                Flow::Continue
            }
            Ok(Admitted::RoutedWholeBody) if end_of_stream => self.role.on_whole_body(body_size),
            Ok(Admitted::RoutedWholeBody) => {
                self.holding_to_end = true;
                Flow::Pause
            }
            Ok(Admitted::Held) => Flow::Pause,
            Err(error) => self.reject(&error),
        }
    }

    fn on_response_headers(&mut self, end_of_stream: bool) -> Flow {
        if self.role.holds_response() {
            return Flow::Pause;
        }
        if let Some(explanation) = self.role.explanation() {
            let _ = self.role.host().set_response_header(header::DECISION, &explanation);
        }
        self.role.on_response_headers(end_of_stream);
        Flow::Continue
    }

    fn on_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Flow {
        self.role.on_response_body(body_size, end_of_stream)
    }

    fn on_http_call_response(&mut self, token: u32, num_headers: usize, body_size: usize) {
        self.role.on_http_call_response(token, num_headers, body_size);
    }

    fn on_log(&mut self) {
        self.role.on_log();
    }
}

/// What the role reads of the response headers.
pub trait ResponseView {
    /// The upstream answered with a 2xx.
    fn served_ok(&self) -> bool;
    /// The answer is a server-sent event stream.
    fn streamed(&self) -> bool;
    /// The pod that answered.
    fn upstream_pod(&self) -> Option<Endpoint>;
}

impl ResponseView for dyn Host + '_ {
    fn served_ok(&self) -> bool {
        self.response_status().is_some_and(|s| (200..300).contains(&s))
    }

    fn streamed(&self) -> bool {
        self.response_header_text("content-type").is_some_and(|t| t.starts_with("text/event-stream"))
    }

    fn upstream_pod(&self) -> Option<Endpoint> {
        self.upstream_address().and_then(|a| a.parse().ok())
    }
}
