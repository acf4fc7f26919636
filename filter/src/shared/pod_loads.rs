//! Every pod's load as this Envoy's workers counted it (in-flight requests, pending
//! prefill tokens), in one shared-data value: a decision reads it once, whatever the
//! pool's size, and a dispatch or an end rewrites it with compare-and-swap, so that a
//! burst that lands on several workers still spreads. Only pods with load are kept, in
//! address order, so the value grows with the busy pods, not with the fleet.
//!
//! Before, each pod had its own key: a decision among 8 pods read 8 keys, each a host
//! call and a copy into the VM.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use infergate_core::endpoint::Endpoint;
use infergate_core::router::PodLoad;
use infergate_core::wire::shared_data::POD_LOADS;

use crate::host::{Host, UpdateError};

/// The table: pods with load, sorted by address.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodLoads(Vec<(Endpoint, PodLoad)>);

/// Per entry: 4 or 6, the address's bytes, the port, the in-flight count and the
/// pending tokens, little endian; 19 bytes for IPv4, 31 for IPv6.
const V6_ENTRY: usize = 1 + 16 + 2 + 4 + 8;

impl PodLoads {
    /// The table in shared data; an absent value is empty.
    pub fn read(host: &dyn Host) -> Self {
        host.shared_value(POD_LOADS).map_or_else(Self::default, |bytes| Self::decode(&bytes))
    }

    pub fn get(&self, pod: Endpoint) -> PodLoad {
        self.0
            .binary_search_by_key(&pod, |(p, _)| *p)
            .ok()
            .and_then(|i| self.0.get(i))
            .map_or_else(PodLoad::default, |(_, l)| *l)
    }

    /// Adds the deltas to `pod`'s load; a pod left with none leaves the table.
    pub fn add(&mut self, pod: Endpoint, in_flight: i32, pending_prefill_tokens: i64) {
        let at = self.0.binary_search_by_key(&pod, |(p, _)| *p);
        let current = at.ok().and_then(|i| self.0.get(i)).map_or_else(PodLoad::default, |(_, l)| *l);
        let next = current.plus(in_flight, pending_prefill_tokens);
        let idle = next.in_flight == 0 && next.pending_prefill_tokens == 0;
        match (at, idle) {
            (Ok(i), true) => {
                self.0.remove(i);
            }
            (Ok(i), false) => {
                if let Some(entry) = self.0.get_mut(i) {
                    entry.1 = next;
                }
            }
            (Err(i), false) => self.0.insert(i, (pod, next)),
            (Err(_), true) => {}
        }
    }

    /// Rewrites the table in shared data with `pod`'s deltas added (retried when
    /// another worker wrote in between) and returns the table written. A write that
    /// fails is logged and dropped: these are estimates, and the next snapshot's
    /// scrape corrects the picture.
    pub fn update(host: &dyn Host, pod: Endpoint, in_flight: i32, pending_prefill_tokens: i64) -> Option<Self> {
        let mut written = None;
        let outcome = host.update_shared_data(POD_LOADS, |current| {
            let mut table = current.map_or_else(Self::default, Self::decode);
            table.add(pod, in_flight, pending_prefill_tokens);
            let bytes = table.encode();
            written = Some(table);
            Ok::<_, ()>(bytes)
        });
        match outcome {
            Ok(()) => written,
            Err(UpdateError::Declined(())) => None,
            Err(UpdateError::Contended) => {
                log::warn!("infergate: {POD_LOADS} not updated: contended");
                None
            }
            Err(UpdateError::Host(status)) => {
                log::warn!("infergate: cannot update {POD_LOADS}: {status:?}");
                None
            }
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.0.len() * V6_ENTRY);
        for (pod, load) in &self.0 {
            let address = pod.socket_addr();
            match address.ip() {
                IpAddr::V4(ip) => {
                    bytes.push(4);
                    bytes.extend_from_slice(&ip.octets());
                }
                IpAddr::V6(ip) => {
                    bytes.push(6);
                    bytes.extend_from_slice(&ip.octets());
                }
            }
            bytes.extend_from_slice(&address.port().to_le_bytes());
            bytes.extend_from_slice(&load.in_flight.to_le_bytes());
            bytes.extend_from_slice(&load.pending_prefill_tokens.to_le_bytes());
        }
        bytes
    }

    /// The table from its bytes; decoding stops at the first entry that does not
    /// decode (a value another version wrote), keeping those before it.
    pub fn decode(mut bytes: &[u8]) -> Self {
        let mut entries = Vec::new();
        while let Some((entry, rest)) = decode_entry(bytes) {
            entries.push(entry);
            bytes = rest;
        }
        entries.sort_by_key(|(pod, _)| *pod);
        entries.dedup_by_key(|(pod, _)| *pod);
        Self(entries)
    }
}

fn decode_entry(bytes: &[u8]) -> Option<((Endpoint, PodLoad), &[u8])> {
    let (ip, rest): (IpAddr, &[u8]) = match bytes.first()? {
        4 => {
            let octets: [u8; 4] = bytes.get(1..5)?.try_into().ok()?;
            (Ipv4Addr::from(octets).into(), bytes.get(5..)?)
        }
        6 => {
            let octets: [u8; 16] = bytes.get(1..17)?.try_into().ok()?;
            (Ipv6Addr::from(octets).into(), bytes.get(17..)?)
        }
        _ => return None,
    };
    let port = u16::from_le_bytes(rest.get(0..2)?.try_into().ok()?);
    let in_flight = u32::from_le_bytes(rest.get(2..6)?.try_into().ok()?);
    let pending_prefill_tokens = u64::from_le_bytes(rest.get(6..14)?.try_into().ok()?);
    let pod = Endpoint::new(SocketAddr::new(ip, port));
    Some(((pod, PodLoad { in_flight, pending_prefill_tokens }), rest.get(14..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(address: &str) -> Endpoint {
        address.parse().unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn a_table_round_trips_and_keeps_only_pods_with_load() {
        let mut table = PodLoads::default();
        table.add(pod("10.0.0.2:8000"), 2, 300);
        table.add(pod("[fd00::1]:8000"), 1, 0);
        table.add(pod("10.0.0.1:8000"), 1, 10);
        table.add(pod("10.0.0.1:8000"), -1, -10);
        assert_eq!(PodLoads::decode(&table.encode()), table);
        assert_eq!(table.0.len(), 2, "the idle pod left");
        assert_eq!(table.get(pod("10.0.0.2:8000")), PodLoad { in_flight: 2, pending_prefill_tokens: 300 });
        assert_eq!(table.get(pod("10.0.0.1:8000")), PodLoad::default());
        assert_eq!(table.encode().len(), 19 + 31);
    }

    #[test]
    fn a_truncated_or_foreign_value_keeps_the_entries_that_decode() {
        let mut table = PodLoads::default();
        table.add(pod("10.0.0.1:8000"), 1, 5);
        table.add(pod("10.0.0.2:8000"), 3, 0);
        let bytes = table.encode();
        let cut = PodLoads::decode(bytes.get(..bytes.len() - 1).unwrap_or_default());
        assert_eq!(cut.0.len(), 1);
        assert!(PodLoads::decode(b"\x07garbage").0.is_empty());
        assert!(PodLoads::decode(&[]).0.is_empty());
    }
}
