//! Prefill/decode disaggregation: the second stage of a decision in a pool with
//! `disaggregation`, and the split verdict.
//!
//! The decode pod is chosen first, among the pods that decode, by the same predicted
//! cost as an aggregated request (a pod holding the prompt's prefix needs less of it
//! moved); the prefill pod is then the cheapest of the pods that prefill, other than
//! the decode pod. Whether to split compares the two ways of serving the request:
//!
//! ```text
//! uncached      = prompt tokens the decode pod does not hold
//! whole_ttft    = the decode pod's predicted TTFT for the whole request
//! interference  = decode pod's running requests × our prefill time there
//!                 (each of its decodes waits through our prefill's chunks)
//! transfer_ms   = uncached × kv_bytes_per_token / transfer bandwidth
//! split_ttft    = prefill pod's predicted TTFT + transfer_ms
//!                 + decode pod's KV wait + adapter load + one decode step
//! split         ⇔ uncached ≥ min_split_tokens and split_ttft < whole_ttft + interference
//! ```
//!
//! The sum is every request's added latency: ours to its first token, and the others'
//! to their next ones. Splitting costs TTFT (a second queue, the transfer, a second
//! request) and saves the decode pod's batch the stall of a prefill; a short prompt, or
//! an idle decode pod, is served whole. `always` and `never` skip the comparison.

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
    pub split_ttft_ms: f64,
    pub transfer_ms: f64,
}

/// The prefill leg of a split request.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefillLeg {
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
    let transfer_ms = settings.transfer_ms(uncached);
    let split_ttft_ms = prefill
        .map_or(f64::INFINITY, |p| p.ttft.ttft_ms + transfer_ms + whole.kv_wait_ms + whole.adapter_ms + whole.step_ms);
    let reason = match (settings.split, prefill) {
        (SplitPolicy::Never, _) => SplitReason::Never,
        (_, None) => SplitReason::NoPrefillPod,
        (SplitPolicy::Always, Some(_)) => SplitReason::Always,
        (SplitPolicy::Predicted, Some(_)) if uncached < f64::from(settings.min_split_tokens) => {
            SplitReason::ShortPrompt
        }
        (SplitPolicy::Predicted, Some(_)) if split_ttft_ms < whole.ttft_ms + interference_ms => SplitReason::Gain,
        (SplitPolicy::Predicted, Some(_)) => SplitReason::NoGain,
    };
    SplitVerdict {
        split: matches!(reason, SplitReason::Always | SplitReason::Gain),
        reason,
        uncached_tokens: uncached,
        whole_ttft_ms: whole.ttft_ms,
        interference_ms,
        split_ttft_ms,
        transfer_ms,
    }
}

impl SplitVerdict {
    /// The `pd=` part of `x-infergate-decision`.
    pub fn describe(&self, prefill: Option<&PrefillLeg>, out: &mut String) {
        let _ = write!(
            out,
            "; pd={} reason={} uncached_tokens={:.0} whole_ttft_ms={:.1} interference_ms={:.1} split_ttft_ms={:.1} transfer_ms={:.1}",
            if self.split { "split" } else { "whole" },
            self.reason.as_str(),
            self.uncached_tokens,
            self.whole_ttft_ms,
            self.interference_ms,
            self.split_ttft_ms,
            self.transfer_ms,
        );
        if let Some(leg) = prefill {
            let _ = write!(out, " prefill={}", leg.endpoint());
        }
    }
}

#[cfg(test)]
mod tests;
