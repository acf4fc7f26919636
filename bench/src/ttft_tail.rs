//! Which requests make a run's TTFT tail, from inference-perf's per-request report
//! (`per_request_lifecycle_metrics.json`: each request's prompt, start time and
//! computed TTFT). Each prefix group's first request is cold under every policy: no
//! pod holds its system prompt yet, and it pays the whole prefill. With 15 groups in
//! 240 requests these are 6% of the run, so they sit inside the slowest tenth and set
//! much of the p90 whatever the routing. Counting them apart says how much of a
//! policy's tail is routing and how much is the workload's cold starts.

use std::collections::HashSet;

use serde_json::Value;

/// Characters of a prompt that name its group: the start of the shared system prompt
/// (1,000 tokens, several thousand characters), distinct per group.
const GROUP_KEY_CHARS: usize = 200;

/// A run's TTFT tail, split by each group's first request.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct TtftTail {
    /// Requests with a TTFT (succeeded).
    pub requests: usize,
    /// The first request of each prefix group, by start time.
    pub group_firsts: usize,
    /// The slowest tenth of the requests (rounded up).
    pub slowest_tenth: usize,
    /// Group firsts among the slowest tenth.
    pub firsts_in_slowest_tenth: usize,
    /// TTFT p90 over the requests that are not their group's first, ms.
    pub p90_without_firsts_ms: f64,
}

/// One succeeded request: when it started (inference-perf's monotonic clock, seconds),
/// its group key and its TTFT in seconds.
struct Timed<'a> {
    start: f64,
    group: &'a str,
    ttft_s: f64,
}

/// The tail of a per-request report; `None` if it holds no request with a TTFT.
pub fn from_per_request(report: &Value) -> Option<TtftTail> {
    let entries = report.as_array()?;
    let prompts: Vec<Option<(f64, String, f64)>> = entries.iter().map(timed).collect();
    let mut timed: Vec<Timed> = prompts
        .iter()
        .flatten()
        .map(|(start, prompt, ttft_s)| Timed { start: *start, group: group_key(prompt), ttft_s: *ttft_s })
        .collect();
    if timed.is_empty() {
        return None;
    }
    timed.sort_by(|a, b| a.start.total_cmp(&b.start));
    let mut seen = HashSet::new();
    let first: Vec<bool> = timed.iter().map(|t| seen.insert(t.group)).collect();
    let mut by_ttft: Vec<(f64, bool)> = timed.iter().zip(&first).map(|(t, &f)| (t.ttft_s, f)).collect();
    by_ttft.sort_by(|a, b| b.0.total_cmp(&a.0));
    let slowest_tenth = timed.len().div_ceil(10);
    let mut rest: Vec<f64> = by_ttft.iter().filter(|(_, f)| !f).map(|(t, _)| *t).collect();
    rest.sort_by(f64::total_cmp);
    Some(TtftTail {
        requests: timed.len(),
        group_firsts: seen.len(),
        slowest_tenth,
        firsts_in_slowest_tenth: by_ttft.iter().take(slowest_tenth).filter(|(_, f)| *f).count(),
        p90_without_firsts_ms: nearest_rank(&rest, 0.9) * 1000.0,
    })
}

/// A succeeded entry's start time, prompt and TTFT; `None` for a failed one.
fn timed(entry: &Value) -> Option<(f64, String, f64)> {
    let start = entry["start_time"].as_f64()?;
    let ttft_s = entry["computed_metrics"]["time_to_first_token"].as_f64()?;
    // The request is the JSON text inference-perf sent.
    let request: Value = match &entry["request"] {
        Value::String(text) => serde_json::from_str(text).ok()?,
        other => other.clone(),
    };
    let prompt = request["prompt"].as_str()?.to_string();
    Some((start, prompt, ttft_s))
}

fn group_key(prompt: &str) -> &str {
    prompt.char_indices().nth(GROUP_KEY_CHARS).map_or(prompt, |(i, _)| prompt.get(..i).unwrap_or(prompt))
}

/// The nearest-rank percentile of sorted `values`; 0 when empty.
fn nearest_rank(sorted: &[f64], quantile: f64) -> f64 {
    let rank = (quantile * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.saturating_sub(1)).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry(start: f64, group: usize, ttft_s: Option<f64>) -> Value {
        let prompt = format!("{} question {start}", format!("system prompt of group {group} ").repeat(20));
        json!({
            "start_time": start,
            "end_time": start + 2.0,
            "request": json!({"model": "smollm2", "prompt": prompt, "stream": true}).to_string(),
            "computed_metrics": ttft_s.map(|t| json!({"time_to_first_token": t})),
            "error": if ttft_s.is_some() { Value::Null } else { json!({"error_type": "timeout"}) },
        })
    }

    #[test]
    fn each_groups_first_request_is_counted_apart_from_the_tail() {
        // Two groups of ten: each first request is cold (2 s), the rest are hits
        // (0.1-0.9 s), one failed request has no TTFT.
        let mut entries = Vec::new();
        for group in 0..2 {
            let base = group as f64 * 100.0;
            entries.push(entry(base, group, Some(2.0)));
            for i in 1..10 {
                entries.push(entry(base + i as f64, group, Some(i as f64 / 10.0)));
            }
        }
        entries.push(entry(50.0, 0, None));
        let tail = from_per_request(&Value::Array(entries)).unwrap_or_default();
        assert_eq!(tail.requests, 20);
        assert_eq!(tail.group_firsts, 2);
        assert_eq!(tail.slowest_tenth, 2);
        assert_eq!(tail.firsts_in_slowest_tenth, 2);
        // The other 18: 0.1..0.9 twice; the 90th percentile by nearest rank is the
        // 17th of 18, 0.9 s.
        assert!((tail.p90_without_firsts_ms - 900.0).abs() < 1e-9, "{tail:?}");
    }

    #[test]
    fn the_first_by_start_time_is_the_groups_first_whatever_the_report_order() {
        let entries = vec![entry(5.0, 0, Some(0.2)), entry(1.0, 0, Some(3.0)), entry(2.0, 0, Some(0.1))];
        let tail = from_per_request(&Value::Array(entries)).unwrap_or_default();
        assert_eq!((tail.group_firsts, tail.firsts_in_slowest_tenth), (1, 1));
        assert!((tail.p90_without_firsts_ms - 200.0).abs() < 1e-9, "{tail:?}");
    }

    #[test]
    fn a_report_without_a_timed_request_has_no_tail() {
        assert_eq!(from_per_request(&json!([])), None);
        assert_eq!(from_per_request(&Value::Array(vec![entry(1.0, 0, None)])), None);
        assert_eq!(from_per_request(&json!({"not": "a list"})), None);
    }
}
