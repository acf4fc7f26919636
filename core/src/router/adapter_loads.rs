//! The adapter loads this router started since its snapshot: requests it sent to a pod
//! whose adapter lists did not have their adapter.
//!
//! A snapshot is up to a scrape interval old, plus the push. Two requests for different
//! adapters sent to the same pod within that window both saw its last free slot: the
//! second then waited for one of the pod's adapters to drain, 1.5-3.7 s in part 2's
//! bursty-chat (BENCHMARKS.md part 2, 2026-12-03), against the 50 ms load it was priced
//! at. So until the next snapshot, an adapter this router sent to a pod counts as
//! listed there as waiting: a request for it finds it loading, and a request for any
//! other adapter finds its slot claimed.
//!
//! Only this router's own sends count: each Envoy worker routes alone, and other
//! workers' and replicas' loads show in the next snapshot.

use crate::endpoint::Endpoint;

/// At most this many loads are kept between two snapshots (with no snapshot coming, the
/// adapter lists go stale and the adapter state becomes unknown anyway).
const MAX_LOADS: usize = 256;

#[derive(Debug, Default, Clone)]
pub struct AdapterLoads(Vec<(Endpoint, String)>);

impl AdapterLoads {
    /// A new snapshot shows what the pods hold: forget the loads sent before it.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// `adapter` was sent to `pod`, which did not list it.
    pub fn record(&mut self, pod: Endpoint, adapter: &str) {
        if self.0.len() < MAX_LOADS && !self.on(pod).any(|a| a == adapter) {
            self.0.push((pod, adapter.to_string()));
        }
    }

    /// The adapters sent to `pod` since the snapshot.
    pub fn on(&self, pod: Endpoint) -> impl Iterator<Item = &str> {
        self.0.iter().filter(move |(at, _)| *at == pod).map(|(_, adapter)| adapter.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_are_kept_per_pod_once_until_cleared() {
        let (a, b): (Endpoint, Endpoint) = ("10.0.0.1:8000".parse().unwrap(), "10.0.0.2:8000".parse().unwrap());
        let mut loads = AdapterLoads::default();
        loads.record(a, "sql");
        loads.record(a, "sql");
        loads.record(a, "chat");
        loads.record(b, "sql");
        assert_eq!(loads.on(a).collect::<Vec<_>>(), ["sql", "chat"]);
        assert_eq!(loads.on(b).collect::<Vec<_>>(), ["sql"]);
        loads.clear();
        assert_eq!(loads.on(a).count(), 0);
    }

    #[test]
    fn the_list_is_bounded() {
        let pod: Endpoint = "10.0.0.1:8000".parse().unwrap();
        let mut loads = AdapterLoads::default();
        for i in 0..2 * MAX_LOADS {
            loads.record(pod, &format!("adapter-{i}"));
        }
        assert_eq!(loads.on(pod).count(), MAX_LOADS);
    }
}
