//! One request through the router: strip spoofable headers, buffer the body, decide,
//! set the routing headers; when the pod produces its first output (the first chunk of
//! a stream, or the headers of a whole answer), release its pending prefill and record
//! the prompt's blocks as its own, and, for a stream, check the predicted TTFT against
//! the clock; when the stream ends, release the in-flight count.

use std::rc::Rc;

use infergate_core::ApiError;
use infergate_core::config::Criticality;
use infergate_core::endpoint::Endpoint;
use infergate_core::request::InferenceRequest;
use infergate_core::router::{Decision, DecisionBasis};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

use super::RouterShared;
use crate::host;
use crate::intake::{self, BodyIntake, Intake, RequestHeaders};
use crate::ledger::SharedLedger;

pub const ENDPOINT_HEADER: &str = "x-gateway-destination-endpoint";
pub const MODEL_HEADER: &str = "x-gateway-model-name";
/// The route match key: which pool's cluster serves the request.
pub const POOL_HEADER: &str = "x-infergate-pool";
pub const DECISION_HEADER: &str = "x-infergate-decision";
/// A client may lower its request's criticality (`sheddable`) with this header; it is
/// read before the reserved headers are stripped.
pub const CRITICALITY_HEADER: &str = "x-infergate-criticality";

/// What a routed request remembers until its stream ends.
struct Routed {
    /// Where its in-flight count was added.
    counted_on: Endpoint,
    /// The prompt's block hashes, recorded once a pod answers.
    hashes: Vec<u64>,
    pool: String,
    /// When it was routed, and the TTFT predicted for it then.
    routed_at_ms: u64,
    predicted_ttft_ms: f64,
    /// Pending prefill tokens counted on `counted_on`, until the first answer.
    pending_prefill_tokens: Option<u64>,
    /// A streamed answer's headers come before its first token: wait for the first
    /// body chunk.
    awaiting_first_chunk: bool,
    /// The pod that answered with a 2xx, read from the response headers (headers can
    /// only be read in the headers callback: the SDK panics on a read in the body's).
    served_ok_by: Option<Endpoint>,
    explanation: Option<String>,
}

pub struct RouterHttp {
    shared: Rc<RouterShared>,
    criticality: Option<Criticality>,
    body: Option<BodyIntake>,
    routed: Option<Routed>,
}

impl RouterHttp {
    pub fn new(shared: Rc<RouterShared>) -> Self {
        Self { shared, criticality: None, body: None, routed: None }
    }

    fn reject(&self, error: &ApiError) -> Action {
        self.shared.metrics.rejected.increment();
        if error.status == 429 {
            self.shared.metrics.shed.increment();
        }
        intake::reply_error(error)
    }

    /// The decision, and when it was made (ms since the epoch).
    fn decide(&mut self, mut request: InferenceRequest) -> Result<(Decision, u64), ApiError> {
        request.criticality = self.criticality;
        let Ok(mut router) = self.shared.router.try_borrow_mut() else {
            return Err(ApiError::no_ready_endpoint("(busy)", 1));
        };
        let now_ms = host::now_unix_ms();
        self.shared.refresh_snapshot(&mut router, now_ms);
        let decision = router.route(&request, now_ms, &mut SharedLedger)?;
        let header_ok = host::set_request_header(POOL_HEADER, Some(&decision.pool))
            .and_then(|()| host::set_request_header(MODEL_HEADER, Some(&request.model)))
            .and_then(|()| host::set_request_header(ENDPOINT_HEADER, Some(&decision.endpoint_header())));
        if let Err(status) = header_ok {
            log::error!("infergate router: cannot set routing headers: {status:?}");
        }
        Ok((decision, now_ms))
    }

    fn record(&mut self, decision: Decision, routed_at_ms: u64) {
        let metrics = &self.shared.metrics;
        match decision.basis {
            DecisionBasis::Signals => metrics.decisions_signals.increment(),
            DecisionBasis::Mixed => metrics.decisions_mixed.increment(),
            DecisionBasis::LoadOnly => metrics.decisions_load_only.increment(),
        }
        if let Some(pool) = self.shared.pool_metrics(&decision.pool) {
            pool.decisions.increment();
            if decision.basis == DecisionBasis::LoadOnly {
                pool.load_only.increment();
            }
            if decision.chosen.matched_blocks > 0 {
                pool.prefix_hits.increment();
            }
            if decision.spilled {
                pool.spills.increment();
            }
        }
        let explanation = self.shared.explain.then(|| decision.explain());
        log::debug!("infergate router: {}", decision.explain());
        self.routed = Some(Routed {
            counted_on: decision.chosen.endpoint,
            hashes: decision.prefix_hashes,
            pool: decision.pool,
            routed_at_ms,
            predicted_ttft_ms: decision.chosen.ttft.ttft_ms,
            pending_prefill_tokens: Some(decision.pending_prefill_tokens),
            awaiting_first_chunk: false,
            served_ok_by: None,
            explanation,
        });
    }
}

impl RouterHttp {
    /// The pod produced its first output: the prefill is done, so its pending tokens
    /// are released and, if it answered successfully, it holds the prompt's blocks.
    fn first_answer(&mut self) {
        let Some(routed) = self.routed.as_mut() else { return };
        // Only a stream's first chunk is its first token; a whole answer's headers come
        // after its last one.
        let first_token = routed.awaiting_first_chunk;
        routed.awaiting_first_chunk = false;
        if let Some(tokens) = routed.pending_prefill_tokens.take() {
            if let Ok(mut router) = self.shared.router.try_borrow_mut() {
                router.prefill_done(routed.counted_on, tokens, &mut SharedLedger);
                if first_token && routed.served_ok_by.is_some() {
                    let observed_ms = host::now_unix_ms().saturating_sub(routed.routed_at_ms) as f64;
                    let error = router.observe_first_token(&routed.pool, routed.predicted_ttft_ms, observed_ms);
                    if let (Some(error), Some(pool)) = (error, self.shared.pool_metrics(&routed.pool)) {
                        pool.ttft_observed_ms.set(observed_ms as u64);
                        pool.ttft_abs_error_ms.set(error.abs() as u64);
                        pool.ttft_factor_milli.set((router.calibration().factor(&routed.pool) * 1000.0) as u64);
                    }
                }
            }
        }
        if let Some(pod) = routed.served_ok_by {
            let hashes = std::mem::take(&mut routed.hashes);
            self.shared.share_prefix(pod, hashes);
        }
    }
}

impl Context for RouterHttp {}

impl HttpContext for RouterHttp {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let headers = RequestHeaders::read();
        if let Some(value) = headers.get(CRITICALITY_HEADER) {
            match Criticality::from_header(value) {
                Some(level) => self.criticality = Some(level),
                None => {
                    return self.reject(&ApiError::invalid_request(
                        "invalid_criticality",
                        None,
                        "`x-infergate-criticality` must be `sheddable`, `standard` or `critical`.",
                    ));
                }
            }
        }
        headers.strip_reserved();
        match intake::on_headers(&headers, end_of_stream, self.shared.max_body_bytes) {
            Ok(Intake::ListModels) => {
                let body = match self.shared.router.try_borrow() {
                    Ok(router) => router.model_list_body(host::now_unix_ms() / 1000),
                    Err(_) => return self.reject(&ApiError::no_ready_endpoint("(busy)", 1)),
                };
                host::reply(200, vec![("content-type", "application/json")], &body);
                Action::Pause
            }
            Ok(Intake::AwaitBody) => Action::Pause,
            Err(error) => self.reject(&error),
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let shared = &self.shared;
        let body =
            self.body.get_or_insert_with(|| BodyIntake::new(shared.prompt_bytes_hashed(), shared.metrics.full_parses));
        let request = match body.on_body(body_size, end_of_stream, shared.max_body_bytes) {
            Ok(Some(request)) => request,
            Ok(None) => return Action::Pause,
            Err(error) => return self.reject(&error),
        };
        match self.decide(request) {
            Ok((decision, routed_at_ms)) => {
                self.record(decision, routed_at_ms);
                Action::Continue
            }
            Err(error) => self.reject(&error),
        }
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let Some(routed) = self.routed.as_mut() else { return Action::Continue };
        if let Some(explanation) = &routed.explanation {
            let _ = host::set_response_header(DECISION_HEADER, explanation);
        }
        let served_ok = host::response_status().is_some_and(|s| (200..300).contains(&s));
        if served_ok {
            routed.served_ok_by = host::upstream_address().and_then(|a| a.parse::<Endpoint>().ok());
        }
        let streamed = host::response_header("content-type").is_some_and(|t| t.starts_with("text/event-stream"));
        if streamed && !end_of_stream {
            // Servers send a stream's headers before the first token is computed.
            routed.awaiting_first_chunk = true;
        } else {
            self.first_answer();
        }
        Action::Continue
    }

    fn on_http_response_body(&mut self, body_size: usize, _end_of_stream: bool) -> Action {
        if body_size > 0 && self.routed.as_ref().is_some_and(|r| r.awaiting_first_chunk) {
            self.first_answer();
        }
        Action::Continue
    }

    fn on_log(&mut self) {
        if let Some(routed) = self.routed.take() {
            if let Ok(mut router) = self.shared.router.try_borrow_mut() {
                let unanswered = routed.pending_prefill_tokens.unwrap_or(0);
                router.release(routed.counted_on, unanswered, &mut SharedLedger);
            }
        }
    }
}
