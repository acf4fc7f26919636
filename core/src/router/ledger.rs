//! What each pod has been sent and not finished: in-flight requests and the prefill
//! tokens not yet answered. Inside Envoy they live in shared data, one small value per
//! pod, so that every worker sees every other worker's requests at the cost of one read
//! per pod; the benchmark and the tests use [`LocalLedger`].

use std::collections::HashMap;

use crate::endpoint::Endpoint;

/// One pod's load as this gateway knows it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PodLoad {
    pub in_flight: u32,
    /// Uncached prompt tokens sent to the pod whose first token has not come back: the
    /// prefill work queued there by this gateway, which a scrape cannot show yet.
    pub pending_prefill_tokens: u64,
}

impl PodLoad {
    /// Adds the deltas, never going below zero.
    pub fn plus(self, in_flight: i32, pending_prefill_tokens: i64) -> Self {
        Self {
            in_flight: self.in_flight.saturating_add_signed(in_flight),
            pending_prefill_tokens: self.pending_prefill_tokens.saturating_add_signed(pending_prefill_tokens),
        }
    }

    /// This load and `other`'s together: this gateway's and the other replicas'.
    pub fn and(self, other: PodLoad) -> Self {
        Self {
            in_flight: self.in_flight.saturating_add(other.in_flight),
            pending_prefill_tokens: self.pending_prefill_tokens.saturating_add(other.pending_prefill_tokens),
        }
    }
}

pub trait LoadLedger {
    fn load(&self, pod: Endpoint) -> PodLoad;
    /// Applies both deltas at once: +1 request and + its prefill tokens on dispatch, −
    /// the tokens at the first answer, −1 when the request finishes.
    fn update(&mut self, pod: Endpoint, in_flight: i32, pending_prefill_tokens: i64);

    fn in_flight(&self, pod: Endpoint) -> u32 {
        self.load(pod).in_flight
    }
}

#[derive(Debug, Default, Clone)]
pub struct LocalLedger {
    loads: HashMap<Endpoint, PodLoad>,
}

impl LoadLedger for LocalLedger {
    fn load(&self, pod: Endpoint) -> PodLoad {
        self.loads.get(&pod).copied().unwrap_or_default()
    }

    fn update(&mut self, pod: Endpoint, in_flight: i32, pending_prefill_tokens: i64) {
        let load = self.loads.entry(pod).or_default();
        *load = load.plus(in_flight, pending_prefill_tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_rise_and_fall_but_not_below_zero() {
        let e: Endpoint = "10.0.0.1:1".parse().unwrap();
        let mut ledger = LocalLedger::default();
        ledger.update(e, 1, 500);
        ledger.update(e, 1, 0);
        ledger.update(e, -1, -200);
        assert_eq!(ledger.load(e), PodLoad { in_flight: 1, pending_prefill_tokens: 300 });
        ledger.update(e, -5, -1000);
        assert_eq!(ledger.load(e), PodLoad::default());
    }
}
