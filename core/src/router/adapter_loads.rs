//! The adapter loads this gateway's routers started that the snapshot cannot show yet:
//! requests sent to a pod whose adapter lists did not have their adapter.
//!
//! A snapshot is up to a scrape interval old, plus the push. Two requests for different
//! adapters sent to the same pod within that window both saw its last free slot: the
//! second then waited for one of the pod's adapters to drain: 3.7 s, in part 2's
//! bursty-chat (BENCHMARKS.md part 2, 2026-12-03), against the 50 ms load it was priced
//! at. So an adapter sent to a pod counts as listed waiting there until a snapshot
//! whose scrape of that pod lists it, or came [`IN_TRANSIT_MS`] after the send: a
//! request for it finds it loading, and a request for any other adapter finds its slot
//! claimed.
//!
//! Each Envoy worker routes alone, so a decision's load also rides in its prefix
//! record (`prefix::AdapterLoad`) to the other workers, within the 5 ms batch, and
//! each router counts those too. With this router's own sends only, two workers of one
//! gateway still sent two adapters to one free slot 20 ms apart (part 2, 2026-12-03:
//! 3.7 s). Other replicas do not get them: the exchange takes as long as the next
//! scrape, and a load's time is this host's clock.
//!
//! The send time is the gateway's clock and the scrape time the agent's. If the
//! agent's runs more than [`IN_TRANSIT_MS`] ahead, a load is dropped at the first
//! scrape that misses it; if it runs behind, a finished load counts up to
//! [`MAX_AGE_MS`] (its slot looks taken). Both hosts are expected to keep NTP time.

use crate::endpoint::Endpoint;
use crate::snapshot::PoolState;

/// At most this many loads are kept (with no snapshot coming, the adapter lists go
/// stale and the adapter state becomes unknown anyway).
const MAX_LOADS: usize = 256;
/// How long after the decision a scrape may still miss the request: Envoy forwards
/// it, and the engine parses and tokenizes it before its scheduler lists it (tens of
/// milliseconds for a long prompt). A scrape 1 ms after the decision did not list it
/// and dropped the load (part 2, 2026-12-03: a second adapter sent to the same slot 11
/// ms later waited 3.2 s).
const IN_TRANSIT_MS: u64 = 250;
/// A load older than this is forgotten whatever the snapshots say: any scrape
/// interval shows it by then, and the gateway's clock and the agent's may disagree.
const MAX_AGE_MS: u64 = 2_000;

#[derive(Debug, Default, Clone)]
pub struct AdapterLoads(Vec<Load>);

#[derive(Debug, Clone)]
struct Load {
    pod: Endpoint,
    adapter: String,
    sent_at_ms: u64,
}

impl AdapterLoads {
    /// A new snapshot: forget the loads its pods' scrapes show (the adapter is listed),
    /// or came [`IN_TRANSIT_MS`] after (the requests are done), and those on pods it no
    /// longer has or never scraped.
    pub fn forget_scraped(&mut self, pools: &[PoolState]) {
        self.0.retain(|load| {
            let mut pods = pools.iter().flat_map(|pool| &pool.pods);
            let Some((pod, scraped_at)) =
                pods.find_map(|p| p.scraped_at_ms.filter(|_| p.address == load.pod).map(|at| (p, at)))
            else {
                return false;
            };
            let listed = pod.signals.as_ref().is_some_and(|s| s.lists_adapter(&load.adapter));
            !listed && scraped_at < load.sent_at_ms.saturating_add(IN_TRANSIT_MS)
        });
    }

    /// Forgets the loads sent more than [`MAX_AGE_MS`] before `now_ms`.
    pub fn expire(&mut self, now_ms: u64) {
        self.0.retain(|load| load.sent_at_ms.saturating_add(MAX_AGE_MS) > now_ms);
    }

    /// `adapter` was sent to `pod` at `now_ms`, and the pod did not list it.
    pub fn record(&mut self, pod: Endpoint, adapter: &str, now_ms: u64) {
        if self.0.len() < MAX_LOADS && !self.on(pod).any(|a| a == adapter) {
            self.0.push(Load { pod, adapter: adapter.to_string(), sent_at_ms: now_ms });
        }
    }

    /// The adapters sent to `pod` that the snapshot cannot show.
    pub fn on(&self, pod: Endpoint) -> impl Iterator<Item = &str> {
        self.0.iter().filter(move |load| load.pod == pod).map(|load| load.adapter.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{PodSignals, PodState};

    fn ep(port: u16) -> Endpoint {
        format!("10.0.0.1:{port}").parse().unwrap()
    }

    fn scraped(pods: &[(u16, u64)]) -> Vec<PoolState> {
        let pods = pods.iter().map(|&(port, at)| PodState::scraped(ep(port), at, PodSignals::default())).collect();
        vec![PoolState { name: "a".into(), pods }]
    }

    #[test]
    fn loads_are_kept_per_pod_once() {
        let mut loads = AdapterLoads::default();
        loads.record(ep(1), "sql", 10);
        loads.record(ep(1), "sql", 11);
        loads.record(ep(1), "chat", 12);
        loads.record(ep(2), "sql", 13);
        assert_eq!(loads.on(ep(1)).collect::<Vec<_>>(), ["sql", "chat"]);
        assert_eq!(loads.on(ep(2)).collect::<Vec<_>>(), ["sql"]);
    }

    #[test]
    fn a_snapshot_forgets_the_loads_its_scrapes_list_or_came_well_after() {
        let mut loads = AdapterLoads::default();
        loads.record(ep(1), "sql", 100);
        loads.record(ep(1), "chat", 140);
        loads.record(ep(2), "sql", 100);
        loads.record(ep(3), "sql", 100);
        // Pod 1 was scraped at 120 and lists "sql" waiting, not "chat" (still in
        // transit); pod 2's scrape at 101 came too soon to list it; pod 3 left the pool.
        let mut pools = scraped(&[(1, 120), (2, 101)]);
        if let Some(pod) = pools.first_mut().and_then(|p| p.pods.first_mut()) {
            pod.signals = Some(PodSignals { waiting_adapters: vec!["sql".into()], ..PodSignals::default() });
        }
        loads.forget_scraped(&pools);
        assert_eq!(loads.on(ep(1)).collect::<Vec<_>>(), ["chat"]);
        assert_eq!(loads.on(ep(2)).collect::<Vec<_>>(), ["sql"]);
        assert_eq!(loads.on(ep(3)).count(), 0);
        // Scrapes long enough after the sends show what runs: a load they do not list
        // finished, or never reached the pod.
        loads.forget_scraped(&scraped(&[(1, 140 + IN_TRANSIT_MS), (2, 100 + IN_TRANSIT_MS)]));
        assert_eq!(loads.on(ep(1)).chain(loads.on(ep(2))).count(), 0);
    }

    #[test]
    fn old_loads_expire() {
        let mut loads = AdapterLoads::default();
        loads.record(ep(1), "sql", 1_000);
        loads.expire(1_000 + MAX_AGE_MS - 1);
        assert_eq!(loads.on(ep(1)).count(), 1);
        loads.expire(1_000 + MAX_AGE_MS);
        assert_eq!(loads.on(ep(1)).count(), 0);
    }

    #[test]
    fn the_list_is_bounded() {
        let mut loads = AdapterLoads::default();
        for i in 0..2 * MAX_LOADS {
            loads.record(ep(1), &format!("adapter-{i}"), 1);
        }
        assert_eq!(loads.on(ep(1)).count(), MAX_LOADS);
    }
}
