//! Prefill/decode disaggregation: the second stage of a decision in a pool with
//! `disaggregation`, and the split verdict.
//!
//! The decode pod is chosen first, among the pods that decode, by the same predicted
//! cost as an aggregated request (a pod holding the prompt's prefix needs less of it
//! moved); the prefill pod is then the cheapest of the pods that prefill, other than
//! the decode pod. Whether to split weighs the two ways of serving the request against
//! the pool's targets (`ttft_target_ms`, `itl_target_ms`), then against each other:
//!
//! ```text
//! uncached      = prompt tokens the decode pod does not hold
//! whole_ttft    = the decode pod's predicted TTFT for the whole request
//! own_prefill   = our prompt's prefill time on the decode pod (what its batch stalls)
//! transfer_ms   = uncached × kv_bytes_per_token / transfer bandwidth
//! split_ttft    = prefill pod's predicted TTFT + transfer_ms
//!                 + decode pod's KV wait + adapter load + one decode step
//! interference  = decode pod's running requests × own_prefill
//! leg_interference = on a prefill pod that also decodes (role both): its running
//!                 requests × its prefill of the prompt; 0 on a prefill-only pod
//! pod step      = the decode pod's learned mean step, unscaled by the TTFT
//!                 calibration: the gap its requests see between tokens
//!
//! 1. uncached < min_split_tokens                                  → whole (short-prompt)
//! 2. split_ttft > 30% of the TTFT target, whole_ttft < split_ttft, and either
//!    whole_ttft ≤ the TTFT target and interference ≤ 5 × ITL target,
//!    or pod step ≤ ITL target / 2 and own_prefill ≤ 5 × ITL target → whole (prefill-queue)
//! 3. pod step > ITL target / 2, and split_ttft ≤ 30% of the TTFT target or the
//!    prefill pod's prefill ≤ 1.5 × own_prefill                     → split (itl-guard)
//! 4. split_ttft + leg_interference < whole_ttft + interference     → split (gain)
//!                                                   otherwise      → whole (no-gain)
//! ```
//!
//! Step 4 sums every request's added latency: ours to its first token, and that of the
//! running requests the prefill stalls, on whichever pod computes it. A prefill pod
//! that also serves whole requests (role both) stalls its own decodes as the decode
//! pod would, so moving the prompt there spares only the difference. Counted on the
//! decode pod alone, agentic sessions on 3 such pods + 5 decode pods had turns with
//! tens of thousands of uncached tokens split onto busy pods to spare one running
//! request: 0.93 req/s of goodput at 32 sessions, against 0.99 serving every turn
//! whole.
//!
//! Alone, step 4 splits until the prefill pods' queues cost more than the stall they
//! spare, seconds under load, far past a TTFT target. Steps 2 and 3 are about the
//! targets instead:
//! - A request the decode pod would serve within the TTFT target is not sent to a
//!   queued prefill pod when serving it whole stalls the decode pod's running requests
//!   by at most 5 ITL targets in all (a few long steps fit in their p90). Agentic turns:
//!   a decode pod holding most of a 400,000-token session computes a few hundred tokens
//!   of it in tens of milliseconds, where the prefill pods queue behind whole sessions
//!   for seconds, even when the decode pod steps past half the ITL target.
//! - Once the prefill pods' predicted TTFT passes 30% of the target (the prediction
//!   lags a growing queue; measured on the benchmark's quick suite, 20–50% alike on the
//!   guide shape), a decode pod with ITL room takes a prompt of at most 5 ITL targets'
//!   prefill whole: a few long steps fit in its requests' p90.
//! - A decode pod whose mean step is past half the ITL target is stalling often enough
//!   that its requests' ITL p90 is at risk; a prefill there would push them over, so the
//!   prompt goes to a prefill pod while one can take it in time, or computes no more of
//!   it than the decode pod would (a pod that holds the prompt's prefix is not passed
//!   over for one that would compute all of it: agentic sessions).
//!
//! `always` and `never` skip all of it.

use std::fmt::Write;

use super::decision::PodReport;
use crate::config::{Disaggregation, SplitPolicy};
use crate::endpoint::Endpoint;

/// Why a request of a disaggregated pool was split or served whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitReason {
    /// `split: always`.
    Always,
    /// `split: never`.
    Never,
    /// No pod other than the decode pod can prefill (or none is ready).
    NoPrefillPod,
    /// Fewer uncached tokens than `min_split_tokens`.
    ShortPrompt,
    /// The decode pod's steps are past half the ITL target: a prefill there would push
    /// its requests' ITL over it.
    ItlGuard,
    /// The prefill pods' predicted TTFT is past 30% of the TTFT target, and the decode
    /// pod is predicted sooner and can take the prompt's prefill: within the TTFT target
    /// with little stall on its running requests, or with ITL room.
    PrefillQueue,
    /// The predicted gain beats the TTFT cost.
    Gain,
    /// Serving it whole is predicted cheaper.
    NoGain,
}

impl SplitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::Never => "never",
            Self::NoPrefillPod => "no-prefill-pod",
            Self::ShortPrompt => "short-prompt",
            Self::ItlGuard => "itl-guard",
            Self::PrefillQueue => "prefill-queue",
            Self::Gain => "gain",
            Self::NoGain => "no-gain",
        }
    }
}

/// The split decision of one request, with its figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitVerdict {
    pub split: bool,
    pub reason: SplitReason,
    /// Prompt tokens the decode pod does not hold: what a split moves.
    pub uncached_tokens: f64,
    pub whole_ttft_ms: f64,
    pub interference_ms: f64,
    /// The same on the prefill pod, when it also decodes.
    pub leg_interference_ms: f64,
    pub split_ttft_ms: f64,
    pub transfer_ms: f64,
}

/// The prefill leg of a split request.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefillLeg {
    /// The pod that decodes the request once this leg returns.
    pub decode: Endpoint,
    /// Best first; the rest are where a failed prefill leg may go next.
    pub endpoints: Vec<Endpoint>,
    pub report: PodReport,
    /// Uncached prompt tokens counted as pending prefill on the prefill pod until the
    /// leg returns.
    pub pending_prefill_tokens: u64,
}

impl PrefillLeg {
    pub fn endpoint(&self) -> Endpoint {
        self.report.endpoint
    }
}

/// The verdict for a request whose decode pod is `decode` and whose best prefill pod,
/// if any, is `prefill`.
pub fn verdict(
    settings: &Disaggregation,
    prompt_tokens: f64,
    decode: &PodReport,
    prefill: Option<&PodReport>,
) -> SplitVerdict {
    let uncached = (prompt_tokens - decode.cached_tokens).max(0.0);
    let whole = &decode.ttft;
    let own_prefill_ms = (whole.prefill_ms - whole.step_ms).max(0.0);
    let interference_ms = decode.running.max(0.0) * own_prefill_ms;
    let leg_interference_ms = prefill.filter(|p| p.role.decodes()).map_or(0.0, |p| {
        let leg_prefill_ms = (p.ttft.prefill_ms - p.ttft.step_ms).max(0.0);
        p.running.max(0.0) * leg_prefill_ms
    });
    let transfer_ms = settings.transfer_ms(uncached);
    let split_ttft_ms = prefill
        .map_or(f64::INFINITY, |p| p.ttft.ttft_ms + transfer_ms + whole.kv_wait_ms + whole.adapter_ms + whole.step_ms);
    let targets = Targets::of(settings);
    let decode_stalls = whole.itl_ms > targets.step_ms;
    let prefill_queued = split_ttft_ms > targets.prefill_queue_ms;
    // Whether the prefill pod computes about as little of the prompt as the decode pod
    // would: it is not passed over for one that holds the prefix.
    let prefill_no_costlier =
        prefill.is_some_and(|p| (p.ttft.prefill_ms - p.ttft.step_ms).max(0.0) <= PREFILL_WORK_RATIO * own_prefill_ms);
    // Step 2's two ways a decode pod can take a request whole: within the TTFT target,
    // stalling its running requests little in all; or with ITL room and a short prefill.
    let whole_in_time = whole.ttft_ms <= targets.ttft_ms && interference_ms <= targets.whole_stall_ms;
    let decode_has_room = !decode_stalls && own_prefill_ms <= targets.whole_stall_ms;
    let reason = match (settings.split, prefill) {
        (SplitPolicy::Never, _) => SplitReason::Never,
        (_, None) => SplitReason::NoPrefillPod,
        (SplitPolicy::Always, Some(_)) => SplitReason::Always,
        (SplitPolicy::Predicted, Some(_)) if uncached < f64::from(settings.min_split_tokens) => {
            SplitReason::ShortPrompt
        }
        (SplitPolicy::Predicted, Some(_))
            if prefill_queued && whole.ttft_ms < split_ttft_ms && (whole_in_time || decode_has_room) =>
        {
            SplitReason::PrefillQueue
        }
        (SplitPolicy::Predicted, Some(_)) if decode_stalls && (!prefill_queued || prefill_no_costlier) => {
            SplitReason::ItlGuard
        }
        (SplitPolicy::Predicted, Some(_)) if split_ttft_ms + leg_interference_ms < whole.ttft_ms + interference_ms => {
            SplitReason::Gain
        }
        (SplitPolicy::Predicted, Some(_)) => SplitReason::NoGain,
    };
    SplitVerdict {
        split: matches!(reason, SplitReason::Always | SplitReason::Gain | SplitReason::ItlGuard),
        reason,
        uncached_tokens: uncached,
        whole_ttft_ms: whole.ttft_ms,
        interference_ms,
        leg_interference_ms,
        split_ttft_ms,
        transfer_ms,
    }
}

/// A prefill pod computing at most this many times the decode pod's share of the prompt
/// still counts as no costlier (step 3): the guide shape's and mixed chat's uncached
/// prompts are alike on both, an agentic turn's is tens of times larger on a pod
/// without its session.
const PREFILL_WORK_RATIO: f64 = 1.5;

/// The thresholds the pool's targets give the split rule (the module's steps 2 and 3).
struct Targets {
    /// A decode pod whose mean step is over this is stalling.
    step_ms: f64,
    /// Prefill pods whose predicted TTFT is over this are queueing.
    prefill_queue_ms: f64,
    /// The longest stall a request served whole may put on the decode pod: its own
    /// prefill on a pod with ITL room, or its running requests' summed stall on any.
    whole_stall_ms: f64,
    /// The TTFT target.
    ttft_ms: f64,
}

impl Targets {
    fn of(settings: &Disaggregation) -> Self {
        let itl = settings.itl_target_ms as f64;
        Self {
            step_ms: itl / 2.0,
            prefill_queue_ms: 0.3 * settings.ttft_target_ms as f64,
            whole_stall_ms: 5.0 * itl,
            ttft_ms: settings.ttft_target_ms as f64,
        }
    }
}

impl SplitVerdict {
    /// The `pd=` part of `x-infergate-decision`.
    pub fn describe(&self, prefill: Option<&PrefillLeg>, out: &mut String) {
        let _ = write!(
            out,
            "; pd={} reason={} uncached_tokens={:.0} whole_ttft_ms={:.1} interference_ms={:.1} split_ttft_ms={:.1} leg_interference_ms={:.1} transfer_ms={:.1}",
            if self.split { "split" } else { "whole" },
            self.reason.as_str(),
            self.uncached_tokens,
            self.whole_ttft_ms,
            self.interference_ms,
            self.split_ttft_ms,
            self.leg_interference_ms,
            self.transfer_ms,
        );
        if let Some(leg) = prefill {
            let _ = write!(out, " prefill={}", leg.endpoint());
        }
    }
}

#[cfg(test)]
mod tests;
