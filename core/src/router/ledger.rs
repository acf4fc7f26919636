//! In-flight counts per pod: requests sent and not yet finished. Inside Envoy they live
//! in shared data so that every worker sees every other worker's requests; the
//! benchmark and the tests use [`LocalLedger`].

use std::collections::HashMap;

use crate::endpoint::Endpoint;

pub trait LoadLedger {
    fn in_flight(&self, pod: Endpoint) -> u32;
    /// Adds `delta` (+1 on dispatch, −1 on finish), never going below zero.
    fn add(&mut self, pod: Endpoint, delta: i32);
    /// Uncached prompt tokens sent to `pod` whose first token has not come back: the
    /// prefill work queued there by this gateway, which a scrape cannot show yet.
    fn pending_prefill(&self, pod: Endpoint) -> u64;
    /// Adds `delta` tokens (+ on dispatch, − at the first token or on failure).
    fn add_pending_prefill(&mut self, pod: Endpoint, delta: i64);
}

#[derive(Debug, Default, Clone)]
pub struct LocalLedger {
    counts: HashMap<Endpoint, u32>,
    prefill: HashMap<Endpoint, u64>,
}

impl LoadLedger for LocalLedger {
    fn in_flight(&self, pod: Endpoint) -> u32 {
        self.counts.get(&pod).copied().unwrap_or(0)
    }

    fn add(&mut self, pod: Endpoint, delta: i32) {
        let count = self.counts.entry(pod).or_default();
        *count = count.saturating_add_signed(delta);
    }

    fn pending_prefill(&self, pod: Endpoint) -> u64 {
        self.prefill.get(&pod).copied().unwrap_or(0)
    }

    fn add_pending_prefill(&mut self, pod: Endpoint, delta: i64) {
        let tokens = self.prefill.entry(pod).or_default();
        *tokens = tokens.saturating_add_signed(delta);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_rise_and_fall_but_not_below_zero() {
        let e: Endpoint = "10.0.0.1:1".parse().unwrap();
        let mut ledger = LocalLedger::default();
        ledger.add(e, 1);
        ledger.add(e, 1);
        ledger.add(e, -1);
        assert_eq!(ledger.in_flight(e), 1);
        ledger.add(e, -5);
        assert_eq!(ledger.in_flight(e), 0);
        ledger.add_pending_prefill(e, 500);
        ledger.add_pending_prefill(e, -200);
        assert_eq!(ledger.pending_prefill(e), 300);
        ledger.add_pending_prefill(e, -1000);
        assert_eq!(ledger.pending_prefill(e), 0);
    }
}
