//! The other replicas' load as the agent's load exchange last pushed it
//! (`infergate_core::replicas::ReplicaLoad`), stored by the control listener with its
//! arrival time, so that a router stops counting on pushes that stopped, and a
//! generation, so that each router worker reads the small counter per request and the
//! push only when it moved. The body is validated before it is stored.

use infergate_core::replicas::{PeerLoad, ReplicaLoad};
use infergate_core::wire::shared_data::{PEER_LOAD, PEER_LOAD_GENERATION};

use super::generation;
use crate::host::Host;

/// One push, as a worker reads it.
pub struct PushedLoad {
    pub generation: u64,
    pub pushed_at_ms: u64,
    pub load: Vec<PeerLoad>,
}

/// Stores a validated push body that arrived at `now_ms`, then bumps the generation.
pub fn store(host: &dyn Host, body: &[u8], now_ms: u64) -> Result<(), String> {
    let mut value = Vec::with_capacity(8 + body.len());
    value.extend_from_slice(&now_ms.to_le_bytes());
    value.extend_from_slice(body);
    host.set_shared_data(PEER_LOAD, &value, None)
        .map_err(|status| format!("cannot store the peer load: {status:?}"))?;
    if generation::bump(host, PEER_LOAD_GENERATION).is_err() {
        log::warn!("infergate control: the peer load generation is contended; routers catch up on the next push");
    }
    Ok(())
}

/// The stored push if the generation moved from `seen`; `None` if it did not, there
/// is none, or it does not decode (logged: only [`store`] writes it).
pub fn read_unless(host: &dyn Host, seen: u64) -> Option<PushedLoad> {
    let published = generation::read(host, PEER_LOAD_GENERATION);
    if published == seen {
        return None;
    }
    let value = host.shared_value(PEER_LOAD)?;
    let (at, body) = value.split_first_chunk::<8>()?;
    match ReplicaLoad::decode(body) {
        Ok(message) => {
            Some(PushedLoad { generation: published, pushed_at_ms: u64::from_le_bytes(*at), load: message.load })
        }
        Err(err) => {
            log::warn!("infergate router: stored peer load {published} does not decode: {err}");
            None
        }
    }
}
