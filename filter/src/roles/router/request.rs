//! One request through the router: honour the client's criticality, decide, set the
//! routing headers; when the pod produces its first output (the first chunk of a
//! stream, or the headers of a whole answer), release its pending prefill and record
//! the prompt's blocks as its own, and, for a stream, check the predicted TTFT against
//! the clock; when the stream ends, release the in-flight count. While the pool's
//! characters per token are being learned, and for one request in [`USAGE_SAMPLING`]
//! after, the answer's `usage` is read for its prompt tokens. Under flow control a
//! request its pool has no room for is held in the gateway queue (`flow`) and routed
//! when the worker's tick releases it. A split request of a disaggregated pool carries
//! its prefill leg (`split`) until the leg ends. The steps every client-facing request
//! takes are `front`'s.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use infergate_core::ApiError;
use infergate_core::config::Criticality;
use infergate_core::config::{FlowControlSettings, PrefixSettings};
use infergate_core::endpoint::Endpoint;
use infergate_core::flow::Ticket;
use infergate_core::prefix::{PrefixChain, PrefixRecord};
use infergate_core::request::InferenceRequest;
use infergate_core::router::{Decision, DecisionBasis, Router, Routing, chars_per_token};
use infergate_core::usage;
use infergate_core::wire::header;

use super::RouterShared;
use super::flow::{Attempt, Held, Outcome};
use super::split::Split;
use crate::host::Host;
use crate::host::events::Flow;
use crate::metrics::Metric;
use crate::roles::front::intake::{EarlyRouting, RequestHeaders, reply_error};
use crate::roles::front::{Admitted, FrontRole, ResponseView};

/// Once a pool's characters per token are learned, one answer in this many is read
/// for its `usage`: reading costs a host call and a scan per streamed chunk.
pub const USAGE_SAMPLING: u64 = 8;

/// Longest TTFT target a client may ask for, milliseconds: one hour.
const MAX_TTFT_TARGET_MS: u64 = 3_600_000;

/// Where a stream's routing is kept: set by the stream's own decision, or by the
/// worker's tick when the gateway queue releases it.
pub type RoutedSlot = Rc<RefCell<Option<Routed>>>;

/// What a routed request remembers until its stream ends.
pub struct Routed {
    /// Where its in-flight count was added.
    pub(super) counted_on: Endpoint,
    /// The prompt's prefix keys, claimed for the chosen pod at the decision; recorded
    /// again for the pod that answers if a retry moved the request.
    prefix: PrefixChain,
    pub(super) pool: String,
    /// When it was routed, and the TTFT predicted for it then.
    routed_at_ms: u64,
    predicted_ttft_ms: f64,
    /// Pending prefill tokens counted on `counted_on`, until the first answer.
    pub(super) pending_prefill_tokens: Option<u64>,
    /// A streamed answer's headers come before its first token: wait for the first
    /// body chunk.
    awaiting_first_chunk: bool,
    /// The pod that answered with a 2xx, read from the response headers (headers can
    /// only be read in the headers callback: the SDK panics on a read in the body's).
    served_ok_by: Option<Endpoint>,
    pub(super) explanation: Option<String>,
    /// A split request's prefill leg, until it ends.
    pub(super) split: Option<Split>,
    /// The prompt's length, while the answer's `usage` is still to be read for its
    /// prompt tokens.
    usage_wanted_for_chars: Option<usize>,
    /// The answer is an event stream (read with the response headers).
    streamed: bool,
    /// Routed before its body ended.
    early: bool,
}

pub struct RouterRequest {
    shared: Rc<RouterShared>,
    context_id: u32,
    criticality: Option<Criticality>,
    ttft_target_ms: Option<u64>,
    /// The request's tenant, read with its headers from the configured source.
    tenant: Option<String>,
    routed: RoutedSlot,
    /// When this stream last checked for a new snapshot (the millisecond): its early
    /// check at the headers and its decision usually fall in the same one, and a
    /// second check there would read the same two generations again.
    refreshed_at_ms: Cell<Option<u64>>,
}

impl RouterRequest {
    pub fn new(shared: Rc<RouterShared>, context_id: u32) -> Self {
        Self {
            shared,
            context_id,
            criticality: None,
            ttft_target_ms: None,
            tenant: None,
            routed: Rc::new(RefCell::new(None)),
            refreshed_at_ms: Cell::new(None),
        }
    }

    /// Adopts what the agent published since this stream last looked, unless it looked
    /// within the same millisecond.
    fn refresh(&self, router: &mut Router, now_ms: u64) {
        if self.refreshed_at_ms.replace(Some(now_ms)) != Some(now_ms) {
            self.shared.refresh_snapshot(router, now_ms);
        }
    }

    /// Routes the request now, or holds it in its pool's gateway queue. A request
    /// routed `early` (its body still arriving) is never held: its body streams on.
    fn admit(&mut self, mut request: InferenceRequest, early: bool) -> Result<Admitted, ApiError> {
        request.criticality = self.criticality;
        let prompt_chars = request.prompt_chars();
        let shared = Rc::clone(&self.shared);
        let Ok(mut router) = shared.router.try_borrow_mut() else {
            return Err(ApiError::gateway_busy());
        };
        let host = &*shared.host;
        let now_ms = host.now_unix_ms();
        self.refresh(&mut router, now_ms);
        let flow = &router.config().flow_control;
        if !flow.enabled || early {
            let decision = router.route(&request, now_ms, &mut shared.ledger())?;
            let mut routed = shared.routed_from(&router, decision, &request.model, now_ms, prompt_chars);
            routed.early = early;
            return Ok(self.keep(routed));
        }
        let flow = flow.clone();
        // Behind requests already held, a new one queues too, whatever room there is:
        // the queue's order decides who goes first.
        let queued_behind = router.config().model(&request.model).and_then(|model| {
            (shared.flow.queued(host, &model.pool) > 0)
                .then(|| (model.pool.clone(), Criticality::effective(model.criticality, request.criticality)))
        });
        let (pool, band) = match queued_behind {
            Some(held_in) => held_in,
            None => match router.route_or_hold(&request, now_ms, &mut shared.ledger(), &flow)? {
                Routing::Routed(decision) => {
                    let routed = shared.routed_from(&router, *decision, &request.model, now_ms, prompt_chars);
                    return Ok(self.keep(routed));
                }
                Routing::Hold { pool, band, .. } => (pool, band),
            },
        };
        let retry_after_s = router.config().settings.retry_after_s;
        let output_tokens = request.max_tokens.map_or(router.config().settings.cost.output_tokens, f64::from);
        let prompt_tokens = prompt_chars as f64 / router.chars_per_token().ratio(&pool);
        drop(router);
        let limits = flow.band(band);
        let ticket = Ticket {
            id: shared.flow.ticket_id(self.context_id),
            band,
            tenant: match &self.tenant {
                Some(tenant) => tenant.clone(),
                // Without an identity source, flow control's header, read only for a
                // held request, with the config of its decision.
                None => Ticket::tenant_name(host.request_header_text(&flow.tenant_header).as_deref()),
            },
            enqueued_ms: now_ms,
            deadline_ms: now_ms.saturating_add(self.ttft_target_ms.unwrap_or(limits.max_wait_ms)),
            expires_ms: now_ms.saturating_add(limits.max_wait_ms),
            cost_tokens: prompt_tokens + output_tokens,
        };
        let held = Held {
            request,
            band,
            pool: pool.clone(),
            enqueued_ms: now_ms,
            expires_ms: ticket.expires_ms,
            prompt_chars,
            slot: Rc::clone(&self.routed),
        };
        shared
            .flow
            .hold(host, self.context_id, ticket, held, &flow)
            .map_err(|why| why.answer(band, &pool, retry_after_s))?;
        shared.keep_ticking();
        Ok(Admitted::Held)
    }

    /// Keeps the stream's routing; a request with a prefill leg to send waits for its
    /// whole body.
    fn keep(&self, routed: Routed) -> Admitted {
        let whole_body = routed.split.as_ref().is_some_and(Split::needs_whole_body);
        *self.routed.borrow_mut() = Some(routed);
        if whole_body { Admitted::RoutedWholeBody } else { Admitted::Routed }
    }

    /// The prefill leg ends with the decode pod's answer (sidecar mode), or with the
    /// stream, if it is still counted.
    fn end_leg(&self) {
        let mut slot = self.routed.borrow_mut();
        if let Some(split) = slot.as_mut().and_then(|routed| routed.split.as_mut()) {
            self.shared.end_leg_here(split);
        }
    }

    /// Reads the prompt tokens from a body chunk holding the answer's `usage`, and
    /// teaches the router the pool's characters per token.
    fn read_usage(&mut self, body_size: usize, end_of_stream: bool) {
        let host = Rc::clone(&self.shared.host);
        let mut slot = self.routed.borrow_mut();
        let Some(routed) = slot.as_mut() else { return };
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
        let mut slot = self.routed.borrow_mut();
        let Some(routed) = slot.as_mut() else { return };
        // Only a stream's first chunk is its first token; a whole answer's headers come
        // after its last one.
        let first_token = routed.awaiting_first_chunk;
        routed.awaiting_first_chunk = false;
        // A whole answer's pending prefill goes with its in-flight count when the
        // stream ends, in one shared-data update instead of two: its headers come after
        // the engine finished, so only the answer's transfer is counted on a little
        // longer.
        let pending = if first_token { routed.pending_prefill_tokens.take() } else { None };
        if let Some(tokens) = pending {
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
            let prefix = std::mem::take(&mut routed.prefix);
            self.shared.share_prefix(pod, prefix);
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

    fn prefix_settings(&self) -> PrefixSettings {
        self.shared.prefix_settings()
    }

    fn full_parses(&self) -> &Metric {
        &self.shared.metrics.full_parses
    }

    fn early_routing(&self) -> Option<EarlyRouting> {
        if !self.shared.early_decision {
            return None;
        }
        // The config of the snapshot the decision will use: flow control may be on.
        let mut router = self.shared.router.try_borrow_mut().ok()?;
        self.refresh(&mut router, self.shared.host.now_unix_ms());
        (!router.config().flow_control.enabled).then(|| self.shared.metrics.early.clone())
    }

    fn read_client_headers(&mut self, headers: &RequestHeaders) -> Result<(), ApiError> {
        if let Some(source) = &self.shared.tenant {
            // Read before the gateway's own headers are stripped: `jwt_authn` writes the
            // verified identity into one of them.
            let tenant = Ticket::tenant_name(headers.get(&source.header));
            if tenant.is_empty() && source.required {
                return Err(ApiError::missing_identity());
            }
            self.tenant = Some(tenant);
        }
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
        if let Some(value) = headers.get(header::TTFT_TARGET_MS) {
            let target = value.trim().parse::<u64>().ok().filter(|ms| (1..=MAX_TTFT_TARGET_MS).contains(ms));
            self.ttft_target_ms = Some(target.ok_or_else(|| {
                ApiError::invalid_request(
                    "invalid_ttft_target",
                    None,
                    "`x-infergate-ttft-target-ms` must be a whole number of milliseconds from 1 to 3600000.",
                )
            })?);
        }
        Ok(())
    }

    fn model_list(&self) -> Result<Vec<u8>, ApiError> {
        let router = self.shared.router.try_borrow().map_err(|_| ApiError::gateway_busy())?;
        Ok(router.model_list_body(self.shared.host.now_unix_ms() / 1000))
    }

    fn route(&mut self, request: InferenceRequest, early: bool) -> Result<Admitted, ApiError> {
        self.admit(request, early)
    }

    fn count_rejection(&self, error: &ApiError) {
        self.shared.metrics.rejected.increment();
        if error.status == 429 {
            self.shared.metrics.shed.increment();
        }
    }

    /// The decision explained, and the tenant it was made for, if any.
    fn explanation(&self) -> Option<String> {
        let explained = self.routed.borrow().as_ref()?.explanation.clone()?;
        Some(match self.tenant.as_deref().filter(|t| !t.is_empty()) {
            Some(tenant) => format!("{explained}; tenant={tenant}"),
            None => explained,
        })
    }

    fn on_whole_body(&mut self, body_size: usize) -> Flow {
        let mut slot = self.routed.borrow_mut();
        match slot.as_mut() {
            Some(routed) => self.shared.on_whole_body(routed, body_size),
            None => Flow::Continue,
        }
    }

    fn on_http_call_response(&mut self, token: u32, num_headers: usize, body_size: usize) {
        let mut slot = self.routed.borrow_mut();
        if let Some(routed) = slot.as_mut() {
            self.shared.on_call_answer(routed, token, num_headers, body_size);
        }
    }

    fn holds_response(&mut self) -> bool {
        let mut slot = self.routed.borrow_mut();
        slot.as_mut().is_some_and(|routed| self.shared.whole_again(routed))
    }

    fn on_response_headers(&mut self, end_of_stream: bool) {
        self.end_leg();
        let host = Rc::clone(&self.shared.host);
        let mut slot = self.routed.borrow_mut();
        let Some(routed) = slot.as_mut() else { return };
        if host.served_ok() {
            routed.served_ok_by = host.upstream_pod();
        } else if routed.early && host.response_status() == Some(400) {
            self.shared.metrics.early_engine_refused.increment();
        }
        routed.streamed = host.streamed();
        if routed.streamed && !end_of_stream {
            // Servers send a stream's headers before the first token is computed.
            routed.awaiting_first_chunk = true;
        } else {
            drop(slot);
            self.first_answer();
        }
    }

    fn on_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Flow {
        let held = self.routed.borrow().as_ref().and_then(|r| r.split.as_ref()).is_some_and(Split::holds_response);
        if held {
            // The decode pod's failure, held until the whole request's answer replaces it.
            return Flow::Pause;
        }
        let awaiting = self.routed.borrow().as_ref().is_some_and(|r| r.awaiting_first_chunk);
        if body_size > 0 && awaiting {
            self.first_answer();
        }
        self.read_usage(body_size, end_of_stream);
        Flow::Continue
    }

    fn on_log(&mut self) {
        self.shared.forget_released_legs(self.context_id);
        if self.shared.flow.holds(self.context_id) {
            // The client left while its request was held.
            self.shared.flow.cancel(&*self.shared.host, self.context_id);
            return;
        }
        let routed = self.routed.borrow_mut().take();
        if let Some(mut routed) = routed {
            if let Ok(mut router) = self.shared.router.try_borrow_mut() {
                let unanswered = routed.pending_prefill_tokens.unwrap_or(0);
                router.release(routed.counted_on, unanswered, &mut self.shared.ledger());
                if let Some(split) = routed.split.as_mut() {
                    self.shared.end_leg(&mut router, split);
                }
            }
        }
    }
}

impl RouterShared {
    /// Takes back what a decision counted that no stream will carry out.
    fn undo(&self, router: &mut Router, decision: &Decision) {
        router.release(decision.chosen.endpoint, decision.pending_prefill_tokens, &mut self.ledger());
        if let Some(leg) = &decision.prefill {
            router.prefill_leg_done(leg, &mut self.ledger());
        }
    }

    /// Sets the routing headers of the current stream (or of the effective one, on a
    /// release from the gateway queue), counts the decision, tells the other workers
    /// and replicas of its prefix claim, and returns what the stream remembers.
    pub(super) fn routed_from(
        &self,
        router: &Router,
        mut decision: Decision,
        model: &str,
        routed_at_ms: u64,
        prompt_chars: usize,
    ) -> Routed {
        let host = &*self.host;
        let header_ok = host
            .set_request_header(header::POOL, Some(&decision.pool))
            .and_then(|()| host.set_request_header(header::MODEL, Some(model)))
            .and_then(|()| host.set_request_header(header::ENDPOINT, Some(&decision.endpoint_header())));
        if let Err(status) = header_ok {
            log::error!("infergate router: cannot set routing headers: {status:?}");
        }
        let metrics = &self.metrics;
        match decision.basis {
            DecisionBasis::Signals => metrics.decisions_signals.increment(),
            DecisionBasis::Mixed => metrics.decisions_mixed.increment(),
            DecisionBasis::LoadOnly => metrics.decisions_load_only.increment(),
        }
        if let Some(pool) = self.pool_metrics(&decision.pool) {
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
        let explanation = self.explain.then(|| decision.explain());
        log::debug!("infergate router: {}", decision.explain());
        let split = self.plan_split(router, &mut decision);
        let learning = router.chars_per_token().samples(&decision.pool) < chars_per_token::WARM_UP;
        let sampled = learning || self.next_request_number() % USAGE_SAMPLING == 0;
        // The claim goes to the other workers and replicas now, not at the first
        // token: a prefix group's next requests reaching them during the prefill would
        // otherwise start cold copies elsewhere (see docs/scheduling.md).
        self.announce_claim(PrefixRecord {
            adapter_load: decision.adapter_load.clone(),
            ..PrefixRecord::of_chain(decision.chosen.endpoint, &decision.prefix)
        });
        Routed {
            counted_on: decision.chosen.endpoint,
            prefix: decision.prefix,
            pool: decision.pool,
            routed_at_ms,
            predicted_ttft_ms: decision.chosen.ttft.ttft_ms,
            pending_prefill_tokens: Some(decision.pending_prefill_tokens),
            awaiting_first_chunk: false,
            early: false,
            served_ok_by: None,
            explanation,
            split,
            usage_wanted_for_chars: sampled.then_some(prompt_chars),
            streamed: false,
        }
    }

    /// One tick of the gateway queue in every pool this worker holds requests in:
    /// released streams get their routing headers and resume; refused ones are
    /// answered.
    pub(super) fn release_held(&self) {
        if !self.flow.holds_any() {
            return;
        }
        let host = &*self.host;
        let Ok(mut router) = self.router.try_borrow_mut() else { return };
        let now_ms = host.now_unix_ms();
        self.refresh_snapshot(&mut router, now_ms);
        let flow: FlowControlSettings = router.config().flow_control.clone();
        let retry_after_s = router.config().settings.retry_after_s;
        for pool in self.flow.pools() {
            let outcomes = self.flow.tick(host, &pool, now_ms, &flow, retry_after_s, |held| {
                match router.route_or_hold(&held.request, now_ms, &mut self.ledger(), &flow) {
                    Ok(Routing::Routed(decision)) => Attempt::Routed(*decision),
                    Ok(Routing::Hold { .. }) => Attempt::Hold,
                    Err(error) => Attempt::Fail(error),
                }
            });
            for outcome in outcomes {
                match outcome {
                    Outcome::Release { context_id, held, routed } => {
                        if let Err(status) = host.set_effective_context(context_id) {
                            // The stream is gone; what was counted for it goes too.
                            log::warn!("infergate flow: released stream {context_id} is gone: {status:?}");
                            self.undo(&mut router, &routed);
                            continue;
                        }
                        let stream = self.routed_from(&router, routed, &held.request.model, now_ms, held.prompt_chars);
                        *held.slot.borrow_mut() = Some(stream);
                        if self.send_released_leg(&mut router, context_id, &held.slot) {
                            // It goes on when its prefill leg is answered.
                            continue;
                        }
                        if let Err(status) = host.resume_request() {
                            // Answered instead; its end releases what was counted.
                            log::error!("infergate flow: cannot resume stream {context_id}: {status:?}");
                            reply_error(host, &ApiError::gateway_busy());
                        }
                    }
                    Outcome::Undo(decision) => self.undo(&mut router, &decision),
                    Outcome::Answer { context_id, error, undo } => {
                        if let Some(decision) = undo {
                            self.undo(&mut router, &decision);
                        }
                        self.metrics.rejected.increment();
                        if error.status == 429 {
                            self.metrics.shed.increment();
                        }
                        if host.set_effective_context(context_id).is_ok() {
                            reply_error(host, &error);
                        }
                    }
                }
            }
        }
    }
}
