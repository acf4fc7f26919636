//! The load ledger of this Envoy's workers, in shared data (`shared::pod_loads`): one
//! value for every pod, read once per decision however many pods the pool has, and
//! updated with compare-and-swap. A burst that lands on several workers within one
//! scrape interval therefore still spreads.

use std::cell::RefCell;

use infergate_core::endpoint::Endpoint;
use infergate_core::router::{LoadLedger, PodLoad};

use crate::host::Host;
use crate::shared::pod_loads::PodLoads;

/// A view of the ledger for one decision or one update: the table is read at the first
/// look and kept, with this view's own updates applied.
pub struct SharedLedger<'a> {
    host: &'a dyn Host,
    table: RefCell<Option<PodLoads>>,
}

impl<'a> SharedLedger<'a> {
    pub fn new(host: &'a dyn Host) -> Self {
        Self { host, table: RefCell::new(None) }
    }
}

impl LoadLedger for SharedLedger<'_> {
    fn load(&self, pod: Endpoint) -> PodLoad {
        let mut table = self.table.borrow_mut();
        table.get_or_insert_with(|| PodLoads::read(self.host)).get(pod)
    }

    fn update(&mut self, pod: Endpoint, in_flight: i32, pending_prefill_tokens: i64) {
        let written = PodLoads::update(self.host, pod, in_flight, pending_prefill_tokens);
        *self.table.get_mut() = written;
    }
}
