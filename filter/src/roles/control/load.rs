//! The load exchange on the control listener (`POST /v1/load`): between snapshots the
//! agent pushes the other replicas' summed load every few milliseconds. It is stored
//! for the router workers (`shared::peer_load`), and the answer is this replica's own
//! load on the pods of the newest snapshot a replicated push brought, which the agent
//! passes on to the others.

use infergate_core::endpoint::Endpoint;
use infergate_core::replicas::{PeerLoad, ReplicaLoad};
use infergate_core::snapshot::Snapshot;
use infergate_core::wire::shared_data::REPLICA_PODS;

use crate::host::Host;
use crate::shared::peer_load;
use crate::shared::pod_loads::PodLoads;

/// Remembers the snapshot's pods, whose load the answers to load pushes report.
pub fn remember_pods(host: &dyn Host, snapshot: &Snapshot) {
    let pods = snapshot.pools.iter().flat_map(|pool| &pool.pods).map(|pod| pod.address.to_string());
    let lines = pods.collect::<Vec<_>>().join("\n");
    if let Err(status) = host.set_shared_data(REPLICA_PODS, lines.as_bytes(), None) {
        log::warn!("infergate control: cannot store the replica's pods for the load exchange: {status:?}");
    }
}

/// This replica's load on `pods`, those that have any.
pub fn own_load(host: &dyn Host, pods: impl Iterator<Item = Endpoint>) -> Vec<PeerLoad> {
    let table = PodLoads::read(host);
    PeerLoad::busy(pods, |pod| table.get(pod))
}

/// Admits a push of the other replicas' load: stored for the routers, answered with
/// this replica's. A body that does not decode, or that the host cannot store, is an
/// error for the agent to log; nothing is stored then.
pub fn admit(host: &dyn Host, body: &[u8]) -> Result<ReplicaLoad, String> {
    ReplicaLoad::decode(body).map_err(|err| err.to_string())?;
    peer_load::store(host, body, host.now_unix_ms())?;
    let lines = host.shared_value(REPLICA_PODS).and_then(|bytes| String::from_utf8(bytes).ok()).unwrap_or_default();
    let pods = lines.lines().filter_map(|line| line.parse::<Endpoint>().ok());
    Ok(ReplicaLoad { load: own_load(host, pods) })
}
