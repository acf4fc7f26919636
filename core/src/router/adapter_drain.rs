//! Keeps LoRA adapters from starving for a slot: no second copy of an adapter where
//! slots are scarce, and a duplicate drained when one exists.
//!
//! vLLM (and model-sim) admit a waiting request only if its adapter is resident or a
//! slot can be freed, and a slot frees only when no running request uses its adapter.
//! While a gateway keeps sending requests for the resident adapters, a pod whose slots
//! all serve running requests never frees one, and a request for any other adapter
//! waits there without end. Part 2's slowest 1% were such requests (BENCHMARKS.md):
//! priced about 1 s, served after 5–23 s. The traces show how it starts: with as many
//! adapters as slots, an adapter spills to a free slot on a second pod when its first
//! is busy (priced one 50 ms load), and the adapter that needed that slot has none.
//!
//! So, from each snapshot:
//! - In a pool whose adapters (configured or seen) are at least as many as its pods'
//!   slots, loading an adapter that already runs elsewhere is a *duplicate*: it pays
//!   half an answer of decoding more, the wait it will cause the adapter left without
//!   a slot. A busy copy is then still preferred to a new one unless its queue is
//!   long. On 24 request sets of part 2's bursty-chat (discrete-event run), requests
//!   over 1 s: 124 → 1, TTFT p99 2,407 → 149 ms, p90 113 → 52 ms.
//! - On a pod where an adapter waits for a slot that running requests hold, a resident
//!   adapter that also runs on a pod with no such waiter (or, if every copy's pod has
//!   one, on the busier pod) is a *surplus* copy: requests for it pay half an answer
//!   there, so its running requests finish and free the slot, and a request for an
//!   adapter with no slot prefers such a pod to one nothing will free.
//!
//! Nothing here loads an adapter on a new pod to make room: the two cost changes that
//! did (BENCHMARKS.md part 2) spread the adapters and made the shortage worse.

use std::collections::{HashMap, HashSet};

use crate::config::ModelConfig;
use crate::endpoint::Endpoint;
use crate::snapshot::{PodSignals, PoolState};

/// Per pool, from one snapshot: the surplus copies (and so the pods freeing a slot),
/// and where each adapter runs when a second copy would be a duplicate.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct AdapterDrain(HashMap<String, PoolDrain>);

/// One pool's plan. Looked up per candidate on the request path, so without allocating.
#[derive(Debug, Default, Clone, PartialEq)]
struct PoolDrain {
    /// The adapters whose copy on each pod is being drained.
    surplus: HashMap<Endpoint, Vec<String>>,
    /// Where each adapter runs, kept only when the pool has no slot to spare.
    scarce_copies: HashMap<String, Vec<Endpoint>>,
}

impl AdapterDrain {
    pub fn plan(pools: &[PoolState], models: &[ModelConfig]) -> Self {
        let mut plans = HashMap::new();
        for pool in pools {
            let pods: Vec<(Endpoint, &PodSignals)> =
                pool.pods.iter().filter(|p| p.ready).filter_map(|p| Some((p.address, p.signals.as_ref()?))).collect();
            let mut copies: HashMap<&str, Vec<(Endpoint, &PodSignals)>> = HashMap::new();
            for &(pod, signals) in &pods {
                for adapter in &signals.running_adapters {
                    copies.entry(adapter.as_str()).or_default().push((pod, signals));
                }
            }
            let mut plan = PoolDrain::default();
            for (&adapter, holders) in copies.iter().filter(|(_, holders)| holders.len() > 1) {
                let Some(kept) = kept_copy(holders) else { continue };
                for &(pod, signals) in holders.iter().filter(|(pod, _)| *pod != kept) {
                    if has_blocked_waiter(signals) {
                        plan.surplus.entry(pod).or_default().push(adapter.to_string());
                    }
                }
            }
            if no_slot_to_spare(&pool.name, &pods, models) {
                plan.scarce_copies = copies
                    .into_iter()
                    .map(|(adapter, holders)| (adapter.to_string(), holders.into_iter().map(|(pod, _)| pod).collect()))
                    .collect();
            }
            if plan != PoolDrain::default() {
                plans.insert(pool.name.clone(), plan);
            }
        }
        Self(plans)
    }

    /// Whether `pod`'s copy of `adapter` is being drained.
    pub fn is_surplus(&self, pool: &str, pod: Endpoint, adapter: &str) -> bool {
        self.0.get(pool).and_then(|p| p.surplus.get(&pod)).is_some_and(|drained| drained.iter().any(|a| a == adapter))
    }

    /// Whether loading `adapter` on `pod` would take a slot the pool has no spare of,
    /// for an adapter that already runs on another pod.
    pub fn is_duplicate(&self, pool: &str, pod: Endpoint, adapter: &str) -> bool {
        self.0.get(pool).and_then(|p| p.scarce_copies.get(adapter)).is_some_and(|on| on.iter().any(|&at| at != pod))
    }

    /// Whether a slot frees on `pod` once its surplus copy drains.
    pub fn is_freeing(&self, pool: &str, pod: Endpoint) -> bool {
        self.0.get(pool).is_some_and(|p| p.surplus.contains_key(&pod))
    }
}

/// The pool's adapters (configured, or seen on its pods) are at least as many as its
/// pods' slots: a second copy of one leaves another with none. Unknown slot counts
/// count as plenty.
fn no_slot_to_spare(pool: &str, pods: &[(Endpoint, &PodSignals)], models: &[ModelConfig]) -> bool {
    let mut slots = 0usize;
    let mut adapters: HashSet<&str> = HashSet::new();
    for (_, signals) in pods {
        let Some(max) = signals.max_loras else { return false };
        slots += max as usize;
        adapters.extend(signals.running_adapters.iter().chain(&signals.waiting_adapters).map(String::as_str));
    }
    adapters.extend(models.iter().filter(|m| m.pool == pool).filter_map(|m| m.adapter.as_deref()));
    slots > 0 && adapters.len() >= slots
}

/// An adapter waits on the pod for a slot: the running adapters and the waiting ones
/// claim more slots than there are.
fn has_blocked_waiter(signals: &PodSignals) -> bool {
    let Some(max) = signals.max_loras else { return false };
    let claimed = signals.claimed_lora_slots();
    claimed > signals.running_adapters.len() && claimed > max as usize
}

/// The copy that keeps its requests: one on a pod with no blocked waiter (the first
/// by address), else the one with the most running requests (ties: the first by
/// address). `None` when no copy needs draining.
fn kept_copy(holders: &[(Endpoint, &PodSignals)]) -> Option<Endpoint> {
    if !holders.iter().any(|(_, s)| has_blocked_waiter(s)) {
        return None;
    }
    let calm = holders.iter().filter(|(_, s)| !has_blocked_waiter(s)).map(|(pod, _)| *pod).min();
    calm.or_else(|| {
        holders
            .iter()
            .map(|(pod, s)| (s.running.unwrap_or(0.0), std::cmp::Reverse(*pod)))
            .max_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
            .map(|(_, std::cmp::Reverse(pod))| pod)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::PodState;

    fn pod(port: u16, running: f64, run: &[&str], wait: &[&str]) -> PodState {
        let signals = PodSignals {
            running: Some(running),
            running_adapters: run.iter().map(|s| s.to_string()).collect(),
            waiting_adapters: wait.iter().map(|s| s.to_string()).collect(),
            max_loras: Some(2),
            ..PodSignals::default()
        };
        PodState::scraped(at(port), 0, signals)
    }

    fn at(port: u16) -> Endpoint {
        Endpoint::new(std::net::SocketAddr::from(([10, 0, 0, 1], port)))
    }

    fn plan(pods: Vec<PodState>) -> AdapterDrain {
        AdapterDrain::plan(&[PoolState { name: "p".into(), pods }], &[])
    }

    #[test]
    fn a_duplicate_on_a_pod_where_an_adapter_starves_is_drained() {
        let drain = plan(vec![pod(1, 30.0, &["a", "b"], &[]), pod(2, 3.0, &["a", "c"], &["d"])]);
        assert!(drain.is_surplus("p", at(2), "a"));
        assert!(!drain.is_surplus("p", at(1), "a"), "the copy where nothing starves keeps its requests");
        assert!(!drain.is_surplus("p", at(2), "c"), "an adapter with no other copy is not drained");
        assert!(drain.is_freeing("p", at(2)) && !drain.is_freeing("p", at(1)));
    }

    #[test]
    fn when_every_copy_has_a_starving_neighbour_the_busier_one_is_kept() {
        let drain = plan(vec![pod(1, 30.0, &["a", "b"], &["d"]), pod(2, 3.0, &["a", "c"], &["d"])]);
        assert!(drain.is_surplus("p", at(2), "a"));
        assert!(!drain.is_surplus("p", at(1), "a"));
    }

    #[test]
    fn a_second_copy_is_a_duplicate_only_when_the_pool_has_no_slot_to_spare() {
        // Four slots; "a", "b", "c" and, waiting, "d": four adapters, none to spare.
        let drain = plan(vec![pod(1, 9.0, &["a", "b"], &[]), pod(2, 1.0, &["c"], &["d"])]);
        assert!(drain.is_duplicate("p", at(2), "a"), "a runs on pod 1 already");
        assert!(!drain.is_duplicate("p", at(1), "a"), "pod 1's own copy");
        assert!(!drain.is_duplicate("p", at(2), "e"), "an adapter running nowhere");
        // Three adapters for four slots: a second copy takes nobody's.
        let spare = plan(vec![pod(1, 9.0, &["a", "b"], &[]), pod(2, 1.0, &["c"], &[])]);
        assert!(!spare.is_duplicate("p", at(2), "a"));
        // A pod that does not say its slot count (no `max_lora`) counts as plenty.
        let mut unsaid = pod(2, 1.0, &["c"], &["d"]);
        if let Some(s) = unsaid.signals.as_mut() {
            s.max_loras = None;
        }
        assert!(!plan(vec![pod(1, 9.0, &["a", "b"], &[]), unsaid]).is_duplicate("p", at(2), "a"));
        assert!(!drain.is_duplicate("other-pool", at(2), "a"), "plans are per pool");
    }

    #[test]
    fn nothing_is_drained_while_no_adapter_waits_for_a_held_slot() {
        // A waiting adapter with a slot still free will load: no drain.
        let mut free = pod(2, 3.0, &["a"], &["d"]);
        if let Some(s) = free.signals.as_mut() {
            s.max_loras = Some(3);
        }
        let drain = plan(vec![pod(1, 30.0, &["a", "b"], &[]), free]);
        assert_eq!(drain, AdapterDrain::default());
        let waiting_for_itself = plan(vec![pod(1, 30.0, &["a", "b"], &[]), pod(2, 3.0, &["a", "c"], &["a"])]);
        assert_eq!(waiting_for_itself, AdapterDrain::default());
    }
}
