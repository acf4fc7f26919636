//! What one run of the P/D benchmark reports: goodput against the service objective,
//! TTFT and ITL percentiles, end-to-end latency, and how many requests were split.

use serde::Serialize;

use super::sim::PdOutcome;
use crate::results::round3;

/// The service objective a request must meet to count in goodput.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Slo {
    pub ttft_ms: f64,
    /// The 90th percentile of the request's own inter-token gaps.
    pub itl_p90_ms: f64,
}

impl Slo {
    /// The P/D target: TTFT ≤ 2 s, ITL p90 ≤ 50 ms.
    pub const TARGET: Slo = Slo { ttft_ms: 2_000.0, itl_p90_ms: 50.0 };
}

/// One policy at one load of one workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PdResult {
    pub policy: String,
    pub fleet: String,
    /// Requests sent (conversation turns due after the end are not).
    pub requests: usize,
    /// Sent but not finished when the run gave up.
    pub unfinished: usize,
    /// Requests meeting the objective per second of arrivals.
    pub goodput_per_s: f64,
    /// Of the requests sent, the share meeting the objective.
    pub slo_attainment: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p90_ms: f64,
    /// Every gap between consecutive tokens of every request, pooled.
    pub itl_p90_ms: f64,
    /// Of the requests' own ITL p90s, the median.
    pub request_itl_p90_median_ms: f64,
    pub e2e_mean_ms: f64,
    pub split_share: f64,
    /// Mean prompt tokens a split moved over the link.
    pub transferred_tokens_mean: f64,
}

/// One workload's runs: its loads, and per policy one result per load.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadRuns {
    pub workload: String,
    /// How a load step reads: "req/s" or "sessions at once".
    pub load_unit: String,
    pub loads: Vec<f64>,
    /// (policy, one result per load)
    pub policies: Vec<(String, Vec<PdResult>)>,
}

/// Nearest-rank percentile of sorted values; 0 for none.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted.get(rank - 1).copied().unwrap_or(0.0)
}

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// The p90 of one request's gaps, milliseconds; 0 with fewer than two tokens.
pub fn request_itl_p90_ms(outcome: &PdOutcome) -> f64 {
    1000.0 * percentile(&sorted(outcome.gaps.iter().map(|&g| f64::from(g)).collect()), 0.9)
}

/// Whether `outcome` finished within `slo`.
pub fn meets(outcome: &PdOutcome, slo: Slo) -> bool {
    match (outcome.first_token, outcome.finished) {
        (Some(first), Some(_)) => {
            1000.0 * (first - outcome.arrival) <= slo.ttft_ms && request_itl_p90_ms(outcome) <= slo.itl_p90_ms
        }
        _ => false,
    }
}

/// The figures of one run whose arrivals lasted `duration_s`.
pub fn summarize(policy: &str, fleet: &str, outcomes: &[PdOutcome], duration_s: f64, slo: Slo) -> PdResult {
    let sent: Vec<&PdOutcome> = outcomes.iter().filter(|o| !o.not_sent).collect();
    let done: Vec<&PdOutcome> =
        sent.iter().copied().filter(|o| o.first_token.is_some() && o.finished.is_some()).collect();
    let ttft = sorted(done.iter().filter_map(|o| o.first_token.map(|t| 1000.0 * (t - o.arrival))).collect());
    let gaps = sorted(done.iter().flat_map(|o| o.gaps.iter().map(|&g| 1000.0 * f64::from(g))).collect());
    let request_itl = sorted(done.iter().filter(|o| !o.gaps.is_empty()).map(|o| request_itl_p90_ms(o)).collect());
    let e2e: f64 = done.iter().filter_map(|o| o.finished.map(|t| 1000.0 * (t - o.arrival))).sum();
    let met = sent.iter().filter(|o| meets(o, slo)).count();
    let splits: Vec<&&PdOutcome> = sent.iter().filter(|o| o.split()).collect();
    let share = |n: usize| if sent.is_empty() { 0.0 } else { n as f64 / sent.len() as f64 };
    PdResult {
        policy: policy.to_string(),
        fleet: fleet.to_string(),
        requests: sent.len(),
        unfinished: sent.len() - done.len(),
        goodput_per_s: round3(if duration_s > 0.0 { met as f64 / duration_s } else { 0.0 }),
        slo_attainment: round3(share(met)),
        ttft_p50_ms: round3(percentile(&ttft, 0.5)),
        ttft_p90_ms: round3(percentile(&ttft, 0.9)),
        itl_p90_ms: round3(percentile(&gaps, 0.9)),
        request_itl_p90_median_ms: round3(percentile(&request_itl, 0.5)),
        e2e_mean_ms: round3(if done.is_empty() { 0.0 } else { e2e / done.len() as f64 }),
        split_share: round3(share(splits.len())),
        transferred_tokens_mean: round3(if splits.is_empty() {
            0.0
        } else {
            splits.iter().map(|o| o.transferred_tokens as f64).sum::<f64>() / splits.len() as f64
        }),
    }
}
