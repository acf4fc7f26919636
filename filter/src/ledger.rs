//! Each pod's load (in-flight requests, pending prefill tokens) in shared data, so that
//! every Envoy worker sees what the others sent: one small key per pod, read once per
//! decision and updated with compare-and-swap. A burst that lands on several workers
//! within one scrape interval therefore still spreads.

use infergate_core::endpoint::Endpoint;
use infergate_core::filter_config::LOAD_KEY_PREFIX;
use infergate_core::router::{LoadLedger, PodLoad};
use proxy_wasm::types::Status;

use crate::host;

/// CAS retries before giving up on one update (contention is between a few workers).
const CAS_ATTEMPTS: usize = 16;

#[derive(Debug, Default, Clone, Copy)]
pub struct SharedLedger;

fn key(pod: Endpoint) -> String {
    format!("{LOAD_KEY_PREFIX}{pod}")
}

fn decode(bytes: Option<&[u8]>) -> PodLoad {
    let word = |range: std::ops::Range<usize>| {
        bytes.and_then(|b| b.get(range)).and_then(|b| <[u8; 8]>::try_from(b).ok()).map_or(0, u64::from_le_bytes)
    };
    PodLoad { in_flight: u32::try_from(word(0..8)).unwrap_or(u32::MAX), pending_prefill_tokens: word(8..16) }
}

fn encode(load: PodLoad) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    let (in_flight, prefill) = bytes.split_at_mut(8);
    in_flight.copy_from_slice(&u64::from(load.in_flight).to_le_bytes());
    prefill.copy_from_slice(&load.pending_prefill_tokens.to_le_bytes());
    bytes
}

impl LoadLedger for SharedLedger {
    fn load(&self, pod: Endpoint) -> PodLoad {
        decode(host::shared_data(&key(pod)).as_deref())
    }

    fn update(&mut self, pod: Endpoint, in_flight: i32, pending_prefill_tokens: i64) {
        let key = key(pod);
        for _ in 0..CAS_ATTEMPTS {
            let (value, cas) = host::shared_data_with_cas(&key);
            let next = decode(value.as_deref()).plus(in_flight, pending_prefill_tokens);
            match host::set_shared_data_cas(&key, &encode(next), cas) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_round_trips_and_short_values_read_as_zero() {
        let load = PodLoad { in_flight: 3, pending_prefill_tokens: 4_000 };
        assert_eq!(decode(Some(&encode(load))), load);
        assert_eq!(decode(Some(&[1, 2, 3])), PodLoad::default());
        assert_eq!(decode(None), PodLoad::default());
    }
}
