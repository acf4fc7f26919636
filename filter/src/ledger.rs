//! In-flight counts and pending prefill tokens in shared data, so that every Envoy
//! worker sees what the others sent: small keys per pod, updated with compare-and-swap.
//! A burst that lands on several workers within one scrape interval therefore still
//! spreads.

use infergate_core::endpoint::Endpoint;
use infergate_core::filter_config::{INFLIGHT_KEY_PREFIX, PREFILL_KEY_PREFIX};
use infergate_core::router::LoadLedger;
use proxy_wasm::types::Status;

use crate::host;

/// CAS retries before giving up on one update (contention is between a few workers).
const CAS_ATTEMPTS: usize = 16;

#[derive(Debug, Default, Clone, Copy)]
pub struct SharedLedger;

fn read(key: &str) -> u64 {
    match host::shared_data(key).as_deref() {
        Some(bytes) => <[u8; 8]>::try_from(bytes)
            .map(u64::from_le_bytes)
            .or_else(|_| <[u8; 4]>::try_from(bytes).map(|b| u64::from(u32::from_le_bytes(b))))
            .unwrap_or(0),
        None => 0,
    }
}

/// Adds `delta` to the counter at `key` with compare-and-swap, never below zero.
fn add(key: &str, delta: i64) {
    for _ in 0..CAS_ATTEMPTS {
        let (value, cas) = host::shared_data_with_cas(key);
        let current = value.as_deref().and_then(|b| <[u8; 8]>::try_from(b).ok()).map_or(0, u64::from_le_bytes);
        let next = current.saturating_add_signed(delta);
        match host::set_shared_data_cas(key, &next.to_le_bytes(), cas) {
            Ok(()) => return,
            Err(Status::CasMismatch) => continue,
            Err(status) => {
                log::warn!("infergate router: cannot update {key}: {status:?}");
                return;
            }
        }
    }
    log::warn!("infergate router: {key} not updated after {CAS_ATTEMPTS} contended attempts");
}

impl LoadLedger for SharedLedger {
    fn in_flight(&self, pod: Endpoint) -> u32 {
        u32::try_from(read(&format!("{INFLIGHT_KEY_PREFIX}{pod}"))).unwrap_or(u32::MAX)
    }

    fn add(&mut self, pod: Endpoint, delta: i32) {
        add(&format!("{INFLIGHT_KEY_PREFIX}{pod}"), i64::from(delta));
    }

    fn pending_prefill(&self, pod: Endpoint) -> u64 {
        read(&format!("{PREFILL_KEY_PREFIX}{pod}"))
    }

    fn add_pending_prefill(&mut self, pod: Endpoint, delta: i64) {
        add(&format!("{PREFILL_KEY_PREFIX}{pod}"), delta);
    }
}
