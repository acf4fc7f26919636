//! The P/D end-to-end check's verdict: per workload, the discrete-event prediction of
//! `pd/infergate` beside what the client measured through Envoy for the same requests,
//! and whether the measured ITL p90 is within [`ITL_TOLERANCE`] of the prediction
//! (the target).

use std::fmt::Write;

use serde::Serialize;

use super::e2e::{MachineLoad, Measured};
use super::sim::PdOutcome;
use super::summary::PdResult;
use crate::results::round3;

/// How far the measured fleet-wide ITL p90 may be from the predicted one.
pub const ITL_TOLERANCE: f64 = 0.25;

/// One workload's prediction and measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub workload: String,
    pub load: f64,
    pub load_unit: String,
    pub duration_s: f64,
    pub time_scale: f64,
    pub predicted: PdResult,
    pub measured: PdResult,
    /// measured / predicted − 1, of the fleet-wide ITL p90.
    pub itl_p90_error: f64,
    /// The same of the median of the requests' own ITL p90s.
    pub request_itl_p90_error: f64,
    /// Whether the fleet-wide ITL p90 is within [`ITL_TOLERANCE`].
    pub within_tolerance: bool,
    /// Of the requests both runs sent, the share both split or both served whole.
    pub same_split_share: f64,
    /// Token events the client read in the same read as the one before.
    pub coalesced_share: f64,
    /// Splits the filter served whole after all (`pd_fallback=`).
    pub fallbacks: usize,
    pub machine: MachineLoad,
}

fn error(measured: f64, predicted: f64) -> f64 {
    if predicted > 0.0 { round3(measured / predicted - 1.0) } else { f64::NAN }
}

impl Comparison {
    /// `predicted` and `measured` summarize `predicted_outcomes` and `measured.outcomes`.
    pub fn new(
        workload: (&str, f64, &str, f64),
        time_scale: f64,
        (predicted, predicted_outcomes): (PdResult, &[PdOutcome]),
        (measured, run): (PdResult, &Measured),
    ) -> Self {
        let both: Vec<(&PdOutcome, &PdOutcome)> =
            predicted_outcomes.iter().zip(&run.outcomes).filter(|(p, m)| !p.not_sent && !m.not_sent).collect();
        let same = both.iter().filter(|(p, m)| p.split() == m.split()).count();
        let tokens: u64 = run.trace.iter().map(|l| u64::from(l.tokens)).sum();
        let coalesced: u64 = run.trace.iter().map(|l| u64::from(l.coalesced)).sum();
        let itl_p90_error = error(measured.itl_p90_ms, predicted.itl_p90_ms);
        Self {
            workload: workload.0.to_string(),
            load: workload.1,
            load_unit: workload.2.to_string(),
            duration_s: workload.3,
            time_scale,
            request_itl_p90_error: error(measured.request_itl_p90_median_ms, predicted.request_itl_p90_median_ms),
            within_tolerance: itl_p90_error.abs() <= ITL_TOLERANCE,
            itl_p90_error,
            same_split_share: round3(if both.is_empty() { 0.0 } else { same as f64 / both.len() as f64 }),
            coalesced_share: round3(if tokens == 0 { 0.0 } else { coalesced as f64 / tokens as f64 }),
            fallbacks: run.trace.iter().filter(|l| l.fallback.is_some()).count(),
            machine: run.load.clone(),
            predicted,
            measured,
        }
    }
}

fn signed_percent(x: f64) -> String {
    if x.is_nan() { "–".into() } else { format!("{:+.1}%", 100.0 * x) }
}

/// Every comparison's table, in Markdown.
pub fn comparison_markdown(comparisons: &[Comparison]) -> String {
    let mut out = String::new();
    for c in comparisons {
        let (p, m) = (&c.predicted, &c.measured);
        let _ = writeln!(
            out,
            "### {} at {} {}, {} s of arrivals\n\n{} requests sent; pods {}× slower than the engine model, arrivals and think times stretched alike; times in simulated ms.\n",
            c.workload, c.load, c.load_unit, c.duration_s, m.requests, c.time_scale
        );
        out.push_str("| | predicted (discrete-event) | measured (Envoy) | difference |\n|---|---:|---:|---:|\n");
        let rows = [
            ("ITL p90, every gap pooled", p.itl_p90_ms, m.itl_p90_ms),
            ("ITL p90 per request, median", p.request_itl_p90_median_ms, m.request_itl_p90_median_ms),
            ("TTFT p50", p.ttft_p50_ms, m.ttft_p50_ms),
            ("TTFT p90", p.ttft_p90_ms, m.ttft_p90_ms),
            ("end to end, mean", p.e2e_mean_ms, m.e2e_mean_ms),
        ];
        for (name, predicted, measured) in rows {
            let _ = writeln!(
                out,
                "| {name} (ms) | {predicted:.1} | {measured:.1} | {} |",
                signed_percent(error(measured, predicted))
            );
        }
        let _ = writeln!(out, "| split | {:.1}% | {:.1}% | |", 100.0 * p.split_share, 100.0 * m.split_share);
        let ok = |r: &PdResult| r.requests - r.unfinished;
        let _ =
            writeln!(out, "| requests ok / failed | {} / {} | {} / {} | |", ok(p), p.unfinished, ok(m), m.unfinished);
        let _ = writeln!(
            out,
            "\n**ITL p90 within {:.0}% of the prediction: {}** ({}; per-request median {}).\n",
            100.0 * ITL_TOLERANCE,
            if c.within_tolerance { "yes" } else { "no" },
            signed_percent(c.itl_p90_error),
            signed_percent(c.request_itl_p90_error),
        );
        let machine = &c.machine;
        let _ = writeln!(
            out,
            "Same split verdict on {:.1}% of requests; {} split(s) served whole after a prefill-leg failure; {:.2}% of token events arrived coalesced with the one before. \
             Load on the machine: {:.0} s of wall time; CPU (cores busy): bench process with the pods {:.2}, Envoy {:.2}, agent {:.2}; requests sent late by p99 {:.1} ms, at most {:.1} ms (real).\n",
            100.0 * c.same_split_share,
            c.fallbacks,
            100.0 * c.coalesced_share,
            machine.wall_s,
            machine.bench_cores,
            machine.envoy_cores,
            machine.agent_cores,
            machine.send_lag_p99_ms,
            machine.send_lag_max_ms,
        );
    }
    out
}
