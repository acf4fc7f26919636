//! A split request of a disaggregated pool, from its decision to the end of its prefill
//! leg.
//!
//! In `sidecar` mode llm-d's routing sidecar on the decode pod runs the leg: the
//! request goes there with `x-prefiller-host-port` naming the prefill pod, and the leg
//! ends when the decode pod's response headers come back.
//!
//! In `gateway` mode the filter runs it. Once the body is whole, the prefill body
//! (`pd_body`) goes to the pool's cluster with the prefill pods in the same
//! `override_host` header that routes the request, and the request is held. A 200
//! answer's `kv_transfer_params` go into the client's body, which then goes on to the
//! decode pod. Any failure sends the client's body on unchanged, served whole by the
//! decode pod: counted by reason, named in `x-infergate-decision`
//! (`pd_fallback=<reason>`) and logged. The client never sees the prefill leg.
//!
//! A request held in the gateway queue sends its leg when the worker's tick releases
//! it. The SDK gives a call's answer to the context whose callback made it, here the
//! root, so the router keeps the released legs by token (`RouterShared::released_legs`)
//! and hands each answer to its stream, made effective.
//!
//! A decode pod that then fails the request (a 5xx: it could not fetch the prompt's KV
//! because the prefill pod died since, say) does not fail the client either: its answer
//! is held and the client's body is sent whole to the decode pods, whose answer (whole,
//! streamed or not) replaces it.
//!
//! Either way the prefill pod is released once (`Router::prefill_leg_done`), when the
//! leg ends or the stream does, whichever comes first.

use std::fmt::Write;
use std::rc::Rc;

use infergate_core::ApiError;
use infergate_core::config::{DisaggMode, Disaggregation};
use infergate_core::filter_config::RouterRole;
use infergate_core::router::{Decision, PrefillLeg, Router};
use infergate_core::wire::header;

use super::RouterShared;
use super::pd_body;
use super::request::{Routed, RoutedSlot};
use crate::host::Host;
use crate::host::events::Flow;
use crate::roles::front::intake::reply_error;

/// A prefill answer that comes this close to the timeout or later is the timeout's:
/// Envoy answers a timed-out call with its own 504.
const TIMEOUT_SLACK_MS: u64 = 10;

/// How long a failed decode leg's whole request may take: `gateway.request_timeout_ms`'s
/// default.
const WHOLE_AGAIN_TIMEOUT_MS: u64 = 300_000;

/// Why a split request was served whole after all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// The prefill call could not be sent (Envoy refused it: no such cluster).
    Dispatch,
    /// No answer within `prefill_timeout_ms`.
    Timeout,
    /// The call failed without an answer (reset).
    Reset,
    /// An answer other than 200.
    Status,
    /// A 200 whose body is not a JSON object.
    BadJson,
    /// A 200 without a `kv_transfer_params` object.
    NoParams,
    /// The client's body could not be read, or rewritten, as a JSON object.
    Body,
    /// The prefill leg worked but the decode pod failed the request (a 5xx): sent
    /// whole to the decode pods again.
    Decode,
}

impl Fallback {
    pub const ALL: [Fallback; 8] = [
        Self::Dispatch,
        Self::Timeout,
        Self::Reset,
        Self::Status,
        Self::BadJson,
        Self::NoParams,
        Self::Body,
        Self::Decode,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dispatch => "dispatch",
            Self::Timeout => "timeout",
            Self::Reset => "reset",
            Self::Status => "status",
            Self::BadJson => "bad_json",
            Self::NoParams => "no_kv_params",
            Self::Body => "body",
            Self::Decode => "decode",
        }
    }
}

/// A split request's prefill leg, as its stream keeps it.
pub struct Split {
    /// Counted on its prefill pod until released, once.
    leg: Option<PrefillLeg>,
    /// The pool's cluster, where the gateway's calls go.
    cluster: String,
    /// The decode pods, ranked (`x-gateway-destination-endpoint`).
    decode_endpoints: String,
    /// What the gateway's calls copy of the client's request, read while Envoy still
    /// holds its headers (it lets them go when the request goes on).
    client: Option<ClientHeaders>,
    stage: Stage,
    /// The prefill tokens the decode pod computes if the request is served whole.
    whole_prefill_tokens: u64,
}

/// The client request's headers a call the gateway sends for it carries.
struct ClientHeaders {
    path: String,
    content_type: String,
    authorization: Option<String>,
}

impl ClientHeaders {
    fn read(host: &dyn Host) -> Option<Self> {
        Some(Self {
            path: host.request_header_text(":path")?,
            content_type: host.request_header_text("content-type").unwrap_or_else(|| "application/json".into()),
            authorization: host.request_header_text("authorization"),
        })
    }
}

enum Stage {
    /// The decode pod's sidecar runs the leg.
    Sidecar,
    /// The gateway sends the leg once the body is whole.
    Planned { timeout_ms: u64 },
    /// The gateway's leg is out; the request waits for it.
    Sent { token: u32, sent_at_ms: u64, timeout_ms: u64, body_size: usize, client_had_params: bool },
    /// The leg worked and the request went to its decode pod with the params: the
    /// client's body, to send whole if the decode pod fails it.
    Decoding { original: Vec<u8> },
    /// The decode pod failed it; the client's body went whole to the decode pods, and
    /// the failed answer is held until theirs comes.
    WholeAgain { token: u32 },
    /// Over: answered, failed, or the stream went first.
    Ended,
}

impl Split {
    /// The request must wait for its whole body, to send the prefill leg first.
    pub fn needs_whole_body(&self) -> bool {
        matches!(self.stage, Stage::Planned { .. })
    }

    /// The decode pod's failed answer is held, to be replaced.
    pub fn holds_response(&self) -> bool {
        matches!(self.stage, Stage::WholeAgain { .. })
    }
}

impl RouterShared {
    /// What the decision's split asks of the stream: in sidecar mode the prefill pod's
    /// header, set now; in gateway mode the leg to send. `None` for a request served
    /// whole. Takes the decision's prefill leg.
    pub(super) fn plan_split(&self, router: &Router, decision: &mut Decision) -> Option<Split> {
        if decision.split.is_some() && decision.prefill.is_none() {
            self.metrics.pd.whole.increment();
        }
        let leg = decision.prefill.take()?;
        self.metrics.pd.split.increment();
        let settings = router.config().pool(&decision.pool).and_then(|p| p.disaggregation.as_ref());
        let (mode, timeout_ms) = settings.map_or_else(
            || (DisaggMode::default(), Disaggregation::default().prefill_timeout_ms),
            |d| (d.mode, d.prefill_timeout_ms),
        );
        let stage = match mode {
            DisaggMode::Sidecar => {
                let prefiller = leg.endpoint().to_string();
                if let Err(status) = self.host.set_request_header(header::PREFILLER_HOST_PORT, Some(&prefiller)) {
                    log::error!("infergate router: cannot name the prefill pod {prefiller}: {status:?}");
                }
                Stage::Sidecar
            }
            DisaggMode::Gateway => Stage::Planned { timeout_ms },
        };
        let decode_endpoints = match stage {
            Stage::Planned { .. } => decision.endpoint_header(),
            _ => String::new(),
        };
        Some(Split {
            leg: Some(leg),
            cluster: RouterRole::cluster_of(&self.pool_clusters, &decision.pool),
            decode_endpoints,
            client: None,
            stage,
            whole_prefill_tokens: decision.whole_prefill_tokens,
        })
    }

    /// The leg is over (or its stream is): its prefill pod no longer counts it.
    pub(super) fn end_leg(&self, router: &mut Router, split: &mut Split) {
        if matches!(split.stage, Stage::Planned { .. } | Stage::Sent { .. }) {
            split.stage = Stage::Ended;
        }
        if let Some(leg) = split.leg.take() {
            router.prefill_leg_done(&leg, &mut self.ledger());
        }
    }

    /// As [`Self::end_leg`], borrowing this worker's router.
    pub(super) fn end_leg_here(&self, split: &mut Split) {
        match self.router.try_borrow_mut() {
            Ok(mut router) => self.end_leg(&mut router, split),
            Err(_) => log::error!("infergate router: router busy; a prefill leg stays counted"),
        }
    }

    /// Serves a split request whole: counts why, says so in the explanation, and
    /// releases the prefill pod.
    pub(super) fn fall_back(&self, router: &mut Router, routed: &mut Routed, why: Fallback) {
        self.metrics.pd.fallback(why);
        log::warn!(
            "infergate router: pool {}: a prefill leg failed ({}); the request is served whole on its decode pod",
            routed.pool,
            why.as_str()
        );
        if let Some(explained) = routed.explanation.as_mut() {
            let _ = write!(explained, "; pd_fallback={}", why.as_str());
        }
        if let Some(split) = routed.split.as_mut() {
            self.end_leg(router, split);
            // The decode pod now prefills the whole prompt, not its last token.
            let whole = split.whole_prefill_tokens;
            router.served_whole(routed.counted_on, &mut routed.pending_prefill_tokens, whole, &mut self.ledger());
        }
    }

    /// The body is whole: sends the prefill leg and holds the request (`Pause`), or,
    /// if it cannot, serves the request whole (`Continue`).
    pub(super) fn on_whole_body(&self, routed: &mut Routed, body_size: usize) -> Flow {
        if !routed.split.as_ref().is_some_and(Split::needs_whole_body) {
            return Flow::Continue;
        }
        let Ok(mut router) = self.router.try_borrow_mut() else {
            log::error!("infergate router: router busy; a split request is sent on without its prefill leg");
            return Flow::Continue;
        };
        match self.send_leg(&mut router, routed, Some(body_size)) {
            Some(_) => Flow::Pause,
            None => Flow::Continue,
        }
    }

    /// Sends the prefill leg of the effective stream, whose whole body Envoy holds
    /// (`body_size` bytes; `None`: all it holds), and returns the call's token; or, if
    /// it cannot, serves the request whole and returns `None`.
    fn send_leg(&self, router: &mut Router, routed: &mut Routed, body_size: Option<usize>) -> Option<u32> {
        let split = routed.split.as_mut()?;
        let Stage::Planned { timeout_ms } = std::mem::replace(&mut split.stage, Stage::Ended) else {
            return None;
        };
        split.client = ClientHeaders::read(&*self.host);
        match self.send_prefill(split, timeout_ms, body_size) {
            Ok(token) => Some(token),
            Err(why) => {
                self.fall_back(router, routed, why);
                None
            }
        }
    }

    fn send_prefill(&self, split: &mut Split, timeout_ms: u64, body_size: Option<usize>) -> Result<u32, Fallback> {
        let host = &*self.host;
        let leg = split.leg.as_ref().ok_or(Fallback::Dispatch)?;
        let client = host.request_body(0, body_size.unwrap_or(usize::MAX)).ok_or(Fallback::Body)?;
        let body_size = client.len();
        let (body, client_had_params) = pd_body::prefill_body(&client)?;
        drop(client);
        let endpoints = leg.endpoints.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        let token = self.post_like_client(split, &endpoints, &body, timeout_ms)?;
        split.stage = Stage::Sent { token, sent_at_ms: host.now_unix_ms(), timeout_ms, body_size, client_had_params };
        Ok(token)
    }

    /// A split request the worker's tick released from the gateway queue (its stream
    /// effective): sends its prefill leg and keeps it by token for the answer, which
    /// comes to the root. Returns whether the stream waits for it; if not, it goes on
    /// whole, and the caller resumes it.
    pub(super) fn send_released_leg(&self, router: &mut Router, context_id: u32, slot: &RoutedSlot) -> bool {
        let Ok(mut routed) = slot.try_borrow_mut() else { return false };
        let Some(routed) = routed.as_mut().filter(|r| r.split.as_ref().is_some_and(Split::needs_whole_body)) else {
            return false;
        };
        let Some(token) = self.send_leg(router, routed, None) else { return false };
        match self.released_legs.try_borrow_mut() {
            Ok(mut legs) => {
                legs.insert(token, (context_id, Rc::clone(slot)));
                true
            }
            Err(_) => {
                // Not kept, its answer would find no stream: served whole instead.
                self.fall_back(router, routed, Fallback::Dispatch);
                false
            }
        }
    }

    /// The answer to a prefill leg a tick sent: handed to its stream, made effective.
    /// A stream that ended before it took its leg's count with it.
    pub(super) fn on_released_leg_answer(&self, token: u32, num_headers: usize, body_size: usize) {
        let Some((context_id, slot)) = self.released_legs.try_borrow_mut().ok().and_then(|mut l| l.remove(&token))
        else {
            // The usual end of a leg whose client left first.
            log::debug!("infergate router: an answer to call {token}, which no released request waits for");
            return;
        };
        if self.host.set_effective_context(context_id).is_err() {
            log::debug!("infergate router: stream {context_id} ended before its prefill leg's answer");
            return;
        }
        let Ok(mut routed) = slot.try_borrow_mut() else { return };
        if let Some(routed) = routed.as_mut() {
            self.on_call_answer(routed, token, num_headers, body_size);
        }
    }

    /// The stream ended: a prefill leg a tick sent for it waits for nothing.
    pub(super) fn forget_released_legs(&self, context_id: u32) {
        if let Ok(mut legs) = self.released_legs.try_borrow_mut() {
            if !legs.is_empty() {
                legs.retain(|_, (stream, _)| *stream != context_id);
            }
        }
    }

    /// The plugin is being torn down, and no answer will come to its root: the
    /// requests whose prefill legs a tick sent go on whole.
    pub(super) fn abandon_released_legs(&self) {
        let legs = match self.released_legs.try_borrow_mut() {
            Ok(mut legs) => std::mem::take(&mut *legs),
            Err(_) => return,
        };
        let Ok(mut router) = self.router.try_borrow_mut() else { return };
        for (context_id, slot) in legs.into_values() {
            if self.host.set_effective_context(context_id).is_err() {
                continue;
            }
            if let Ok(mut routed) = slot.try_borrow_mut() {
                if let Some(routed) = routed.as_mut() {
                    self.fall_back(&mut router, routed, Fallback::Reset);
                }
            }
            if self.host.resume_request().is_err() {
                reply_error(&*self.host, &ApiError::gateway_busy());
            }
        }
    }

    /// POSTs `body` to `endpoints` of the pool's cluster (the `override_host` header)
    /// with the client request's path, content type and credentials.
    fn post_like_client(&self, split: &Split, endpoints: &str, body: &[u8], timeout_ms: u64) -> Result<u32, Fallback> {
        let client = split.client.as_ref().ok_or(Fallback::Body)?;
        let cluster = split.cluster.as_str();
        let mut headers = vec![
            (":method", "POST"),
            (":path", client.path.as_str()),
            (":authority", cluster),
            ("content-type", client.content_type.as_str()),
            (header::ENDPOINT, endpoints),
        ];
        if let Some(authorization) = client.authorization.as_deref() {
            headers.push(("authorization", authorization));
        }
        self.host.dispatch_http_call(cluster, &headers, body, timeout_ms).map_err(|status| {
            log::warn!("infergate router: cannot send a call to {cluster}: {status:?}");
            Fallback::Dispatch
        })
    }

    /// The answer to a call this stream's split sent: its prefill leg's, or its whole
    /// request's after a failed decode leg.
    pub(super) fn on_call_answer(&self, routed: &mut Routed, token: u32, num_headers: usize, body_size: usize) {
        match routed.split.as_ref().map(|split| &split.stage) {
            Some(Stage::Sent { .. }) => self.on_prefill_answer(routed, token, num_headers, body_size),
            Some(Stage::WholeAgain { .. }) => self.on_whole_again_answer(routed, token, num_headers, body_size),
            _ => {}
        }
    }

    /// The prefill leg's answer (`num_headers` 0: the call failed): the decode leg's
    /// body from it, or the client's as it came; the request goes on either way.
    fn on_prefill_answer(&self, routed: &mut Routed, token: u32, num_headers: usize, body_size: usize) {
        let Some(split) = routed.split.as_mut() else { return };
        let Stage::Sent { token: sent, sent_at_ms, timeout_ms, body_size: client_size, client_had_params } =
            split.stage
        else {
            return;
        };
        if sent != token {
            return;
        }
        let host = &*self.host;
        let elapsed_ms = host.now_unix_ms().saturating_sub(sent_at_ms);
        let timed_out = elapsed_ms.saturating_add(TIMEOUT_SLACK_MS) >= timeout_ms;
        let outcome = self
            .read_answer(num_headers, body_size, timed_out)
            .and_then(|params| self.rewrite_body(client_size, &params, client_had_params));
        let Ok(mut router) = self.router.try_borrow_mut() else {
            log::error!("infergate router: router busy; a prefill leg stays counted");
            return;
        };
        match outcome {
            Ok(original) => {
                self.end_leg(&mut router, split);
                split.stage = Stage::Decoding { original };
                self.metrics.pd.prefill_ok.increment();
                self.metrics.pd.prefill_ms.set(elapsed_ms);
                if let Some(explained) = routed.explanation.as_mut() {
                    let _ = write!(explained, "; pd_prefill=ok prefill_ms={elapsed_ms}");
                }
            }
            Err(why) => self.fall_back(&mut router, routed, why),
        }
        drop(router);
        if let Err(status) = host.resume_request() {
            log::error!("infergate router: cannot resume a request after its prefill leg: {status:?}");
            reply_error(host, &ApiError::gateway_busy());
        }
    }

    /// The `kv_transfer_params` of the answer being delivered.
    fn read_answer(&self, num_headers: usize, body_size: usize, timed_out: bool) -> Result<String, Fallback> {
        let host = &*self.host;
        // A failed call has no headers to read (Envoy refuses the read).
        if num_headers == 0 {
            return Err(if timed_out { Fallback::Timeout } else { Fallback::Reset });
        }
        let status = host.http_call_response_header(":status");
        if status.as_deref() != Some(&b"200"[..]) {
            return Err(if timed_out { Fallback::Timeout } else { Fallback::Status });
        }
        let answer = host.http_call_response_body(0, body_size).ok_or(Fallback::BadJson)?;
        pd_body::answered_params(&answer)
    }

    /// Replaces the client's body, `size` bytes in Envoy's buffer, with the decode
    /// leg's, and its length, and returns the client's; on a failure the client's body
    /// stays as it came.
    fn rewrite_body(&self, size: usize, params: &str, client_had_params: bool) -> Result<Vec<u8>, Fallback> {
        let host = &*self.host;
        let client = host.request_body(0, size).filter(|b| b.len() == size).ok_or(Fallback::Body)?;
        let body = pd_body::decode_body(&client, params, client_had_params)?;
        host.set_request_body(size, &body).map_err(|_| Fallback::Body)?;
        if host.set_request_header("content-length", Some(&body.len().to_string())).is_err() {
            let _ = host.set_request_body(body.len(), &client);
            return Err(Fallback::Body);
        }
        Ok(client)
    }

    /// The decode pod's answer is in. A failure (5xx) of a decode leg that carried the
    /// prefill leg's params is held, and the client's body sent whole to the decode
    /// pods instead; returns whether it was. Any other answer lets the client's body go.
    pub(super) fn whole_again(&self, routed: &mut Routed) -> bool {
        let Some(split) = routed.split.as_mut().filter(|split| matches!(split.stage, Stage::Decoding { .. })) else {
            return false;
        };
        let Stage::Decoding { original } = std::mem::replace(&mut split.stage, Stage::Ended) else {
            return false;
        };
        let host = &*self.host;
        if host.response_status().is_none_or(|status| status < 500) {
            return false;
        }
        match self.post_like_client(split, &split.decode_endpoints, &original, WHOLE_AGAIN_TIMEOUT_MS) {
            Ok(token) => split.stage = Stage::WholeAgain { token },
            Err(_) => return false,
        }
        self.metrics.pd.fallback(Fallback::Decode);
        log::warn!(
            "infergate router: pool {}: a decode leg failed; the request is sent whole to its decode pods again",
            routed.pool
        );
        // The decode pods prefill the whole prompt now; it counts until the stream ends.
        let whole = split.whole_prefill_tokens;
        match self.router.try_borrow_mut() {
            Ok(mut router) => {
                router.served_whole(routed.counted_on, &mut routed.pending_prefill_tokens, whole, &mut self.ledger());
            }
            Err(_) => log::error!("infergate router: router busy; a prompt sent whole again is counted as one token"),
        }
        if let Some(explained) = routed.explanation.as_mut() {
            let _ = write!(explained, "; pd_fallback={}", Fallback::Decode.as_str());
        }
        true
    }

    /// The whole request's answer replaces the decode pod's failure; without one, the
    /// failure goes on.
    fn on_whole_again_answer(&self, routed: &mut Routed, token: u32, num_headers: usize, body_size: usize) {
        let Some(split) = routed.split.as_mut() else { return };
        if !matches!(split.stage, Stage::WholeAgain { token: sent } if sent == token) {
            return;
        }
        split.stage = Stage::Ended;
        let host = &*self.host;
        let status = (num_headers > 0)
            .then(|| host.http_call_response_header(":status"))
            .flatten()
            .and_then(|s| std::str::from_utf8(&s).ok()?.parse::<u32>().ok());
        let Some(status) = status else {
            log::warn!("infergate router: the whole request after a failed decode leg got no answer");
            if let Err(refused) = host.resume_response() {
                log::error!("infergate router: cannot resume a held answer: {refused:?}");
            }
            return;
        };
        let content_type = host.http_call_response_header("content-type").and_then(|v| String::from_utf8(v).ok());
        let body = host.http_call_response_body(0, body_size).unwrap_or_default();
        let mut headers = vec![("content-type", content_type.as_deref().unwrap_or("application/json"))];
        if let Some(explained) = routed.explanation.as_deref() {
            headers.push((header::DECISION, explained));
        }
        host.reply(status, &headers, &body);
    }
}
