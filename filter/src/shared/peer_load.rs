//! The other replicas' load as the agent's load exchange last pushed it
//! (`infergate_core::replicas::ReplicaLoad`), stored by the control listener and read
//! by every router worker per request: a sequence, so that a worker decodes each push
//! once, the arrival time, so that a router stops counting on pushes that stopped, and
//! the push's MessagePack body, validated before it is stored.

use infergate_core::replicas::{PeerLoad, ReplicaLoad};
use infergate_core::wire::shared_data::PEER_LOAD;

use crate::host::{Host, UpdateError};

/// The 8-byte sequence and 8-byte arrival time before the body.
const HEADER_BYTES: usize = 16;

/// One push, as a worker reads it.
pub struct PushedLoad {
    pub sequence: u64,
    pub pushed_at_ms: u64,
    pub load: Vec<PeerLoad>,
}

/// Stores a validated push body that arrived at `now_ms`, under the next sequence.
pub fn store(host: &dyn Host, body: &[u8], now_ms: u64) -> Result<(), String> {
    let next = |current: Option<&[u8]>| -> Result<Vec<u8>, ()> {
        let sequence = current.and_then(|bytes| split(bytes)).map_or(0, |(sequence, _, _)| sequence);
        let mut value = Vec::with_capacity(HEADER_BYTES + body.len());
        value.extend_from_slice(&sequence.wrapping_add(1).to_le_bytes());
        value.extend_from_slice(&now_ms.to_le_bytes());
        value.extend_from_slice(body);
        Ok(value)
    };
    match host.update_shared_data(PEER_LOAD, next) {
        Ok(()) => Ok(()),
        Err(UpdateError::Contended) => Err("other workers kept writing the peer load".into()),
        Err(UpdateError::Host(status)) => Err(format!("cannot store the peer load: {status:?}")),
        Err(UpdateError::Declined(())) => Ok(()),
    }
}

/// The stored push if its sequence is not `seen`; `None` if there is none, it is the
/// one already seen, or it does not decode (logged: only [`store`] writes it).
pub fn read_unless(host: &dyn Host, seen: u64) -> Option<PushedLoad> {
    let value = host.shared_value(PEER_LOAD)?;
    let (sequence, pushed_at_ms, body) = split(&value)?;
    if sequence == seen {
        return None;
    }
    match ReplicaLoad::decode(body) {
        Ok(message) => Some(PushedLoad { sequence, pushed_at_ms, load: message.load }),
        Err(err) => {
            log::warn!("infergate router: stored peer load {sequence} does not decode: {err}");
            None
        }
    }
}

fn split(value: &[u8]) -> Option<(u64, u64, &[u8])> {
    let (sequence, rest) = value.split_first_chunk::<8>()?;
    let (at, body) = rest.split_first_chunk::<8>()?;
    Some((u64::from_le_bytes(*sequence), u64::from_le_bytes(*at), body))
}
