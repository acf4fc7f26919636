//! What one run measured, per request and for the fleet.

use hdrhistogram::Histogram;
use infergate_model_sim::engine::Engine;
use serde::Serialize;

use crate::calibration::CalibrationResult;

#[derive(Debug, Clone, Copy, Default)]
pub struct RequestOutcome {
    pub arrival: f64,
    pub first_token: Option<f64>,
    pub finished: Option<f64>,
    pub output_tokens: u32,
    pub pod: usize,
    /// A conversation turn that would have arrived after the end: not sent, not counted.
    pub not_sent: bool,
    /// Refused by the policy (a sheddable request with nowhere to go).
    pub shed: bool,
    /// Prompt tokens its pod found in its prefix cache.
    pub cached_tokens: u32,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Percentiles {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    pub requests: usize,
    pub failed: usize,
    pub ttft_ms: Percentiles,
    pub tpot_p90_ms: f64,
    pub e2e_p90_ms: f64,
    pub output_tokens_per_s: f64,
    pub prefix_hit_rate: f64,
    pub lora_loads: u64,
    /// Coefficient of variation of busy time across pods.
    pub load_imbalance_cv: f64,
    /// Only the `calibration` scenarios measure these.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration: Option<CalibrationResult>,
    /// What the router believed its pod held of each prompt against what the pod's
    /// cache had (policies that keep a belief: infergate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_belief: Option<PrefixBelief>,
}

/// The prompt tokens a router believed the chosen pod held, for one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Belief {
    pub id: usize,
    pub believed_tokens: f64,
}

/// A router's prefix index against the pods' caches, over the requests that had their
/// first token: the tokens it believed cached on the pod it chose, and the tokens the
/// pod found cached at admission (what vLLM reports as `cached_tokens`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PrefixBelief {
    pub requests: usize,
    /// Σ believed ÷ Σ cached: above 1 the index is optimistic.
    pub believed_over_cached: f64,
    /// Requests whose belief exceeded the cache by more than a 64-token block.
    pub optimistic_share: f64,
    /// Requests whose cache exceeded the belief by more than a block.
    pub pessimistic_share: f64,
    /// Mean |believed − cached| ÷ mean prompt tokens... in tokens.
    pub mean_abs_error_tokens: f64,
}

impl PrefixBelief {
    pub fn measure(beliefs: &[Belief], outcomes: &[RequestOutcome]) -> Self {
        const SLACK: f64 = 64.0;
        let pairs: Vec<(f64, f64)> = beliefs
            .iter()
            .filter_map(|b| {
                outcomes
                    .get(b.id)
                    .filter(|o| o.first_token.is_some())
                    .map(|o| (b.believed_tokens, f64::from(o.cached_tokens)))
            })
            .collect();
        let n = pairs.len().max(1) as f64;
        let (believed, cached): (f64, f64) = pairs.iter().fold((0.0, 0.0), |(b, c), (x, y)| (b + x, c + y));
        Self {
            requests: pairs.len(),
            believed_over_cached: round3(if cached > 0.0 { believed / cached } else { 0.0 }),
            optimistic_share: round3(pairs.iter().filter(|(b, c)| b > &(c + SLACK)).count() as f64 / n),
            pessimistic_share: round3(pairs.iter().filter(|(b, c)| c > &(b + SLACK)).count() as f64 / n),
            mean_abs_error_tokens: round3(pairs.iter().map(|(b, c)| (b - c).abs()).sum::<f64>() / n),
        }
    }
}

/// Microseconds from 1 µs to one hour, three significant digits.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant, valid histogram bounds")
}

fn micros(seconds: f64) -> u64 {
    (seconds * 1e6).round().clamp(1.0, 3.6e9) as u64
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// Rounds to 0.001 so that JSON output is stable and readable.
pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl RunResult {
    /// Client-side measurements only (the fleet's counters are not read).
    pub fn from_outcomes(outcomes: &[RequestOutcome]) -> Self {
        Self::collect(outcomes, &[])
    }

    pub fn collect(outcomes: &[RequestOutcome], engines: &[Engine]) -> Self {
        let (mut ttft, mut tpot, mut e2e) = (histogram(), histogram(), histogram());
        let mut failed = 0;
        let mut tokens = 0u64;
        let (mut first, mut last) = (f64::INFINITY, 0.0f64);
        let sent: Vec<&RequestOutcome> = outcomes.iter().filter(|o| !o.not_sent && !o.shed).collect();
        for o in sent.iter().copied() {
            let (Some(ft), Some(done)) = (o.first_token, o.finished) else {
                failed += 1;
                continue;
            };
            let _ = ttft.record(micros(ft - o.arrival));
            let _ = e2e.record(micros(done - o.arrival));
            if o.output_tokens > 1 {
                let _ = tpot.record(micros((done - ft) / f64::from(o.output_tokens - 1)));
            }
            tokens += u64::from(o.output_tokens);
            first = first.min(o.arrival);
            last = last.max(done);
        }
        let stats: Vec<_> = engines.iter().map(|e| e.stats(last)).collect();
        let (hits, queries) = stats
            .iter()
            .fold((0u64, 0u64), |(h, q), s| (h + s.prefix_cache_hits_total, q + s.prefix_cache_queries_total));
        let busy: Vec<f64> = stats.iter().map(|s| s.busy_seconds).collect();
        let mean = busy.iter().sum::<f64>() / busy.len().max(1) as f64;
        let var = busy.iter().map(|b| (b - mean).powi(2)).sum::<f64>() / busy.len().max(1) as f64;
        Self {
            requests: sent.len(),
            failed,
            ttft_ms: Percentiles {
                mean: round3(ttft.mean() / 1000.0),
                p50: round3(ms(&ttft, 0.5)),
                p90: round3(ms(&ttft, 0.9)),
                p99: round3(ms(&ttft, 0.99)),
            },
            tpot_p90_ms: round3(ms(&tpot, 0.9)),
            e2e_p90_ms: round3(ms(&e2e, 0.9)),
            output_tokens_per_s: round3(if last > first { tokens as f64 / (last - first) } else { 0.0 }),
            prefix_hit_rate: round3(if queries > 0 { hits as f64 / queries as f64 } else { 0.0 }),
            lora_loads: stats.iter().map(|s| s.lora_loads_total).sum(),
            load_imbalance_cv: round3(if mean > 0.0 { var.sqrt() / mean } else { 0.0 }),
            calibration: None,
            prefix_belief: None,
        }
    }
}

impl RunResult {
    /// The mean over seeds of every figure (counts rounded), the calibration and belief
    /// measurements of the first seed's run: what the tables and targets use when a
    /// suite runs several seeds. `None` for no runs.
    pub fn mean_over(runs: &[RunResult]) -> Option<RunResult> {
        let first = runs.first()?;
        let n = runs.len() as f64;
        let mean = |f: fn(&RunResult) -> f64| round3(runs.iter().map(f).sum::<f64>() / n);
        let count = |f: fn(&RunResult) -> f64| (runs.iter().map(f).sum::<f64>() / n).round();
        Some(RunResult {
            requests: count(|r| r.requests as f64) as usize,
            failed: count(|r| r.failed as f64) as usize,
            ttft_ms: Percentiles {
                mean: mean(|r| r.ttft_ms.mean),
                p50: mean(|r| r.ttft_ms.p50),
                p90: mean(|r| r.ttft_ms.p90),
                p99: mean(|r| r.ttft_ms.p99),
            },
            tpot_p90_ms: mean(|r| r.tpot_p90_ms),
            e2e_p90_ms: mean(|r| r.e2e_p90_ms),
            output_tokens_per_s: mean(|r| r.output_tokens_per_s),
            prefix_hit_rate: mean(|r| r.prefix_hit_rate),
            lora_loads: count(|r| r.lora_loads as f64) as u64,
            load_imbalance_cv: mean(|r| r.load_imbalance_cv),
            calibration: first.calibration.clone(),
            prefix_belief: first.prefix_belief,
        })
    }
}

/// TTFT percentiles of the answered requests among `outcomes`.
pub(crate) fn ttft_percentiles<'a>(outcomes: impl Iterator<Item = &'a RequestOutcome>) -> Percentiles {
    let mut ttft = histogram();
    for o in outcomes {
        if let (Some(ft), Some(_)) = (o.first_token, o.finished) {
            let _ = ttft.record(micros(ft - o.arrival));
        }
    }
    Percentiles {
        mean: round3(ttft.mean() / 1000.0),
        p50: round3(ms(&ttft, 0.5)),
        p90: round3(ms(&ttft, 0.9)),
        p99: round3(ms(&ttft, 0.99)),
    }
}
