//! The requests the global router sent each cluster since the cluster's newest summary
//! and that have not started answering: the summary cannot count them yet. They are
//! counted in shared data, by every worker, so that a burst spread over the workers
//! weighs in full on each; counted per worker, each would see only its share and all
//! would keep sending to the same cheapest cluster.
//!
//! One key per cluster holds the summary's sequence and the count under it. A count
//! under an older summary reads as zero, so a new summary resets it without a write.

use infergate_core::wire::shared_data::BACKLOG_PREFIX;

use crate::host::Host;
use crate::shared::words;

fn key(cluster: &str) -> String {
    format!("{BACKLOG_PREFIX}{cluster}")
}

/// Requests sent to `cluster` since its summary `summary` and not answering yet.
pub fn sent_since(host: &dyn Host, cluster: &str, summary: u64) -> u32 {
    match words::read(host, &key(cluster)) {
        (sequence, count) if sequence == summary => u32::try_from(count).unwrap_or(u32::MAX),
        _ => 0,
    }
}

/// One more request sent to `cluster` under its summary `summary`.
pub fn sent(host: &dyn Host, cluster: &str, summary: u64) {
    words::update(host, &key(cluster), |(sequence, count)| {
        Some((summary, if sequence == summary { count.saturating_add(1) } else { 1 }))
    });
}

/// A request sent under `summary` started answering. If a newer summary came
/// meanwhile, it already counts the request, and nothing changes.
pub fn answered(host: &dyn Host, cluster: &str, summary: u64) {
    words::update(host, &key(cluster), |(sequence, count)| {
        (sequence == summary).then(|| (summary, count.saturating_sub(1)))
    });
}
