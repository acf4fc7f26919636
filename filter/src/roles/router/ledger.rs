//! Each pod's load (in-flight requests, pending prefill tokens) in shared data, so that
//! every Envoy worker sees what the others sent: one small key per pod, read once per
//! decision and updated with compare-and-swap. A burst that lands on several workers
//! within one scrape interval therefore still spreads.

use infergate_core::endpoint::Endpoint;
use infergate_core::router::{LoadLedger, PodLoad};
use infergate_core::wire::shared_data::LOAD_PREFIX;

use crate::host::Host;
use crate::shared::words;

pub struct SharedLedger<'a>(pub &'a dyn Host);

fn key(pod: Endpoint) -> String {
    format!("{LOAD_PREFIX}{pod}")
}

/// The in-flight count, then the pending prefill tokens.
fn from_words((in_flight, pending_prefill_tokens): (u64, u64)) -> PodLoad {
    PodLoad { in_flight: u32::try_from(in_flight).unwrap_or(u32::MAX), pending_prefill_tokens }
}

impl LoadLedger for SharedLedger<'_> {
    fn load(&self, pod: Endpoint) -> PodLoad {
        from_words(words::read(self.0, &key(pod)))
    }

    fn update(&mut self, pod: Endpoint, in_flight: i32, pending_prefill_tokens: i64) {
        words::update(self.0, &key(pod), |current| {
            let next = from_words(current).plus(in_flight, pending_prefill_tokens);
            Some((u64::from(next.in_flight), next.pending_prefill_tokens))
        });
    }
}
