//! In-flight counts in shared data, so that every Envoy worker sees what the others
//! sent: one small key per pod, updated with compare-and-swap. A burst that lands on
//! several workers within one scrape interval therefore still spreads.

use infergate_core::endpoint::Endpoint;
use infergate_core::filter_config::INFLIGHT_KEY_PREFIX;
use infergate_core::router::LoadLedger;
use proxy_wasm::types::Status;

use crate::host;

/// CAS retries before giving up on one update (contention is between a few workers).
const CAS_ATTEMPTS: usize = 16;

#[derive(Debug, Default, Clone, Copy)]
pub struct SharedLedger;

fn key(pod: Endpoint) -> String {
    format!("{INFLIGHT_KEY_PREFIX}{pod}")
}

fn decode(bytes: Option<&[u8]>) -> u32 {
    bytes.and_then(|b| <[u8; 4]>::try_from(b).ok()).map_or(0, u32::from_le_bytes)
}

impl LoadLedger for SharedLedger {
    fn in_flight(&self, pod: Endpoint) -> u32 {
        decode(host::shared_data(&key(pod)).as_deref())
    }

    fn add(&mut self, pod: Endpoint, delta: i32) {
        let key = key(pod);
        for _ in 0..CAS_ATTEMPTS {
            let (value, cas) = host::shared_data_with_cas(&key);
            let next = decode(value.as_deref()).saturating_add_signed(delta);
            match host::set_shared_data_cas(&key, &next.to_le_bytes(), cas) {
                Ok(()) => return,
                Err(Status::CasMismatch) => continue,
                Err(status) => {
                    log::warn!("infergate router: cannot update the in-flight count of {pod}: {status:?}");
                    return;
                }
            }
        }
        log::warn!("infergate router: in-flight count of {pod} not updated after {CAS_ATTEMPTS} contended attempts");
    }
}
