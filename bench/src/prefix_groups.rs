//! Where each prefix group went, read back from the gateway's access log: each line
//! carries infergate's decision, whose `prefix_head` (the hash of the prompt's first
//! block) names the group's shared system prompt. A group's home is the pod that served
//! most of its requests; a request served elsewhere re-prefilled the group's prefix
//! there. This tells a routing loss (groups split over pods) from an engine's loss
//! (the home pod evicted the prefix) when the engines' hit rate is below its ceiling.

use std::collections::HashMap;

/// How a run's prefix groups were spread over the pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GroupSpread {
    /// Distinct prefix groups seen.
    pub groups: usize,
    /// Requests that carried a decision with a prefix.
    pub requests: usize,
    /// Requests served by a pod other than their group's home.
    pub away_from_home: usize,
}

/// The spread in an access log's text; `None` when no line carries a decision (a
/// baseline policy, or explanations turned off).
pub fn from_access_log(text: &str) -> Option<GroupSpread> {
    let mut pods_by_group: HashMap<&str, HashMap<&str, usize>> = HashMap::new();
    for line in text.lines().filter(|l| l.starts_with("[access]")) {
        let (Some(pod), Some(head)) = (field(line, "upstream="), field(line, "prefix_head=")) else { continue };
        if head != "-" {
            *pods_by_group.entry(head).or_default().entry(pod).or_default() += 1;
        }
    }
    if pods_by_group.is_empty() {
        return None;
    }
    let mut spread = GroupSpread { groups: pods_by_group.len(), ..GroupSpread::default() };
    for pods in pods_by_group.values() {
        let total: usize = pods.values().sum();
        let home = pods.values().copied().max().unwrap_or(0);
        spread.requests += total;
        spread.away_from_home += total - home;
    }
    Some(spread)
}

/// The value after `key`, up to the next space, `;` or `"`.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(key)? + key.len();
    let rest = line.get(start..)?;
    let end = rest.find([' ', ';', '"']).unwrap_or(rest.len());
    rest.get(..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(pod: &str, head: &str) -> String {
        format!(
            "[access] 2026-12-02T02:30:00.000Z \"POST /v1/chat/completions\" 200 - model=smollm2 pool=fleet upstream={pod} attempts=1 duration_ms=900 ttfb_ms=10 decision=\"pool=fleet; basis=snapshot; scoring=predicted-ttft; spilled=false; prefix_blocks=9; prefix_head={head}; snapshot_age_ms=40; endpoints={pod}; chosen={pod} ttft_ms=300.0\"\n"
        )
    }

    #[test]
    fn counts_the_requests_served_away_from_their_groups_home() {
        let log = [
            line("10.0.0.1:8000", "aaaa"),
            line("10.0.0.1:8000", "aaaa"),
            line("10.0.0.2:8000", "aaaa"),
            line("10.0.0.2:8000", "bbbb"),
            line("10.0.0.2:8000", "-"),
            "[info] not an access line\n".to_string(),
        ]
        .concat();
        assert_eq!(from_access_log(&log), Some(GroupSpread { groups: 2, requests: 4, away_from_home: 1 }));
    }

    #[test]
    fn a_log_without_decisions_has_no_spread() {
        let baseline = "[access] 2026-12-02T02:30:00.000Z \"POST /v1/chat/completions\" 200 - model=smollm2 pool=fleet upstream=10.0.0.1:8000 attempts=1 duration_ms=900 ttfb_ms=10 decision=\"-\"\n";
        assert_eq!(from_access_log(baseline), None);
    }
}
