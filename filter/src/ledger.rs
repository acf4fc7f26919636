//! Each pod's load (in-flight requests, pending prefill tokens) in shared data, so that
//! every Envoy worker sees what the others sent: one small key per pod, read once per
//! decision and updated with compare-and-swap. A burst that lands on several workers
//! within one scrape interval therefore still spreads.

use infergate_core::endpoint::Endpoint;
use infergate_core::filter_config::LOAD_KEY_PREFIX;
use infergate_core::router::{LoadLedger, PodLoad};

use crate::shared_words;

#[derive(Debug, Default, Clone, Copy)]
pub struct SharedLedger;

fn key(pod: Endpoint) -> String {
    format!("{LOAD_KEY_PREFIX}{pod}")
}

/// The in-flight count, then the pending prefill tokens.
fn from_words((in_flight, pending_prefill_tokens): (u64, u64)) -> PodLoad {
    PodLoad { in_flight: u32::try_from(in_flight).unwrap_or(u32::MAX), pending_prefill_tokens }
}

impl LoadLedger for SharedLedger {
    fn load(&self, pod: Endpoint) -> PodLoad {
        from_words(shared_words::read(&key(pod)))
    }

    fn update(&mut self, pod: Endpoint, in_flight: i32, pending_prefill_tokens: i64) {
        shared_words::update(&key(pod), |words| {
            let next = from_words(words).plus(in_flight, pending_prefill_tokens);
            Some((u64::from(next.in_flight), next.pending_prefill_tokens))
        });
    }
}
