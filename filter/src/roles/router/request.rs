//! One request through the router: honour the client's criticality, decide, set the
//! routing headers; when the pod produces its first output (the first chunk of a
//! stream, or the headers of a whole answer), release its pending prefill and record
//! the prompt's blocks as its own, and, for a stream, check the predicted TTFT against
//! the clock; when the stream ends, release the in-flight count. While the pool's
//! characters per token are being learned, and for one request in [`USAGE_SAMPLING`]
//! after, the answer's `usage` is read for its prompt tokens. The steps every
//! client-facing request takes are `front`'s.

use std::rc::Rc;

use infergate_core::ApiError;
use infergate_core::config::Criticality;
use infergate_core::endpoint::Endpoint;
use infergate_core::request::InferenceRequest;
use infergate_core::router::{Decision, DecisionBasis, chars_per_token};
use infergate_core::usage;
use infergate_core::wire::header;

use super::RouterShared;
use crate::host::Host;
use crate::host::events::Flow;
use crate::metrics::Metric;
use crate::roles::front::intake::RequestHeaders;
use crate::roles::front::{FrontRole, ResponseView};

/// Once a pool's characters per token are learned, one answer in this many is read
/// for its `usage`: reading costs a host call and a scan per streamed chunk.
pub const USAGE_SAMPLING: u64 = 8;

/// What a routed request remembers until its stream ends.
struct Routed {
    /// Where its in-flight count was added.
    counted_on: Endpoint,
    /// The prompt's block hashes, claimed for the chosen pod at the decision; recorded
    /// again for the pod that answers if a retry moved the request.
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
    /// The prompt's length, while the answer's `usage` is still to be read for its
    /// prompt tokens.
    usage_wanted_for_chars: Option<usize>,
    /// The answer is an event stream (read with the response headers).
    streamed: bool,
}

pub struct RouterRequest {
    shared: Rc<RouterShared>,
    criticality: Option<Criticality>,
    routed: Option<Routed>,
}

impl RouterRequest {
    pub fn new(shared: Rc<RouterShared>) -> Self {
        Self { shared, criticality: None, routed: None }
    }

    /// The decision, and when it was made (ms since the epoch).
    fn decide(&mut self, mut request: InferenceRequest) -> Result<(Decision, u64), ApiError> {
        request.criticality = self.criticality;
        let Ok(mut router) = self.shared.router.try_borrow_mut() else {
            return Err(ApiError::gateway_busy());
        };
        let host = &*self.shared.host;
        let now_ms = host.now_unix_ms();
        self.shared.refresh_snapshot(&mut router, now_ms);
        let decision = router.route(&request, now_ms, &mut self.shared.ledger())?;
        let header_ok = host
            .set_request_header(header::POOL, Some(&decision.pool))
            .and_then(|()| host.set_request_header(header::MODEL, Some(&request.model)))
            .and_then(|()| host.set_request_header(header::ENDPOINT, Some(&decision.endpoint_header())));
        if let Err(status) = header_ok {
            log::error!("infergate router: cannot set routing headers: {status:?}");
        }
        Ok((decision, now_ms))
    }

    fn record(&mut self, decision: Decision, routed_at_ms: u64, prompt_chars: usize) {
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
        let learning = self
            .shared
            .router
            .try_borrow()
            .is_ok_and(|router| router.chars_per_token().samples(&decision.pool) < chars_per_token::WARM_UP);
        let sampled = learning || self.shared.next_request_number() % USAGE_SAMPLING == 0;
        // The claim goes to the other workers and replicas now, not at the first
        // token: a prefix group's next requests reaching them during the prefill would
        // otherwise start cold copies elsewhere (see docs/scheduling.md).
        self.shared.announce_claim(decision.chosen.endpoint, decision.prefix_hashes.clone());
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
            usage_wanted_for_chars: sampled.then_some(prompt_chars),
            streamed: false,
        });
    }

    /// Reads the prompt tokens from a body chunk holding the answer's `usage`, and
    /// teaches the router the pool's characters per token.
    fn read_usage(&mut self, body_size: usize, end_of_stream: bool) {
        let host = Rc::clone(&self.shared.host);
        let Some(routed) = self.routed.as_mut() else { return };
        let Some(prompt_chars) = routed.usage_wanted_for_chars else { return };
        if routed.served_ok_by.is_none() || body_size == 0 {
            return;
        }
        let found = if routed.streamed {
            host.response_body(0, body_size).as_deref().and_then(usage::of_stream_chunk)
        } else if end_of_stream {
            // A whole answer in one chunk; one that came in several is not read.
            host.response_body(0, body_size).as_deref().and_then(usage::of_answer)
        } else {
            None
        };
        let Some(found) = found else { return };
        routed.usage_wanted_for_chars = None;
        if let Ok(mut router) = self.shared.router.try_borrow_mut() {
            if router.observe_usage(&routed.pool, prompt_chars, found.prompt_tokens) {
                if let Some(pool) = self.shared.pool_metrics(&routed.pool) {
                    let ratio = router.chars_per_token().ratio(&routed.pool);
                    pool.chars_per_token_milli.set((ratio * 1000.0) as u64);
                }
            }
        }
    }

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
                router.prefill_done(routed.counted_on, tokens, &mut self.shared.ledger());
                if first_token && routed.served_ok_by.is_some() {
                    let observed_ms = self.shared.host.now_unix_ms().saturating_sub(routed.routed_at_ms) as f64;
                    let error = router.observe_first_token(&routed.pool, routed.predicted_ttft_ms, observed_ms);
                    if let (Some(error), Some(pool)) = (error, self.shared.pool_metrics(&routed.pool)) {
                        pool.ttft_observed_ms.set(observed_ms as u64);
                        pool.ttft_abs_error_ms.set(error.abs() as u64);
                        pool.ttft_factor_milli.set((router.calibration().factor(&routed.pool) * 1000.0) as u64);
                    }
                }
            }
        }
        // Announced at the decision; a retry that another pod answered moves it there.
        if let Some(pod) = routed.served_ok_by.filter(|pod| *pod != routed.counted_on) {
            let hashes = std::mem::take(&mut routed.hashes);
            self.shared.share_prefix(pod, hashes);
        }
    }
}

impl FrontRole for RouterRequest {
    fn host(&self) -> &dyn Host {
        &*self.shared.host
    }

    fn max_body_bytes(&self) -> u64 {
        self.shared.max_body_bytes
    }

    fn prompt_bytes_kept(&self) -> usize {
        self.shared.prompt_bytes_hashed()
    }

    fn full_parses(&self) -> &Metric {
        &self.shared.metrics.full_parses
    }

    fn read_client_headers(&mut self, headers: &RequestHeaders) -> Result<(), ApiError> {
        if let Some(value) = headers.get(header::CRITICALITY) {
            let level = Criticality::from_header(value).ok_or_else(|| {
                ApiError::invalid_request(
                    "invalid_criticality",
                    None,
                    "`x-infergate-criticality` must be `sheddable`, `standard` or `critical`.",
                )
            })?;
            self.criticality = Some(level);
        }
        Ok(())
    }

    fn model_list(&self) -> Result<Vec<u8>, ApiError> {
        let router = self.shared.router.try_borrow().map_err(|_| ApiError::gateway_busy())?;
        Ok(router.model_list_body(self.shared.host.now_unix_ms() / 1000))
    }

    fn route(&mut self, request: InferenceRequest) -> Result<(), ApiError> {
        let prompt_chars = request.prompt_chars();
        let (decision, routed_at_ms) = self.decide(request)?;
        self.record(decision, routed_at_ms, prompt_chars);
        Ok(())
    }

    fn count_rejection(&self, error: &ApiError) {
        self.shared.metrics.rejected.increment();
        if error.status == 429 {
            self.shared.metrics.shed.increment();
        }
    }

    fn explanation(&self) -> Option<&str> {
        self.routed.as_ref()?.explanation.as_deref()
    }

    fn on_response_headers(&mut self, end_of_stream: bool) {
        let host = Rc::clone(&self.shared.host);
        let Some(routed) = self.routed.as_mut() else { return };
        if host.served_ok() {
            routed.served_ok_by = host.upstream_pod();
        }
        routed.streamed = host.streamed();
        if routed.streamed && !end_of_stream {
            // Servers send a stream's headers before the first token is computed.
            routed.awaiting_first_chunk = true;
        } else {
            self.first_answer();
        }
    }

    fn on_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Flow {
        if body_size > 0 && self.routed.as_ref().is_some_and(|r| r.awaiting_first_chunk) {
            self.first_answer();
        }
        self.read_usage(body_size, end_of_stream);
        Flow::Continue
    }

    fn on_log(&mut self) {
        if let Some(routed) = self.routed.take() {
            if let Ok(mut router) = self.shared.router.try_borrow_mut() {
                let unanswered = routed.pending_prefill_tokens.unwrap_or(0);
                router.release(routed.counted_on, unanswered, &mut self.shared.ledger());
            }
        }
    }
}
