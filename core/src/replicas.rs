//! Active-active gateway replicas: what one replica tells the others, through the agent.
//!
//! Each Envoy replica keeps its own prefix index, built from its own decisions, and its
//! own in-flight counts. To route as one, replicas exchange both through the pushes the
//! agent already makes: a replica answers each snapshot push with a [`ReplicaDigest`]
//! of the prefix records its workers made since its last answer and its current load
//! per pod; the agent merges the digests and sends each replica, inside its next
//! snapshot, the records of the others and their summed load. A record thus reaches
//! every replica within about two push intervals (200 ms by default), well before a
//! conversation's next turn; `docs/replicas.md` gives the trade-offs.
//!
//! Loads go faster than records: requests that reach two replicas within one push
//! interval are otherwise decided blind to each other. Between snapshots the agent
//! pushes each replica the others' summed load every few milliseconds
//! ([`ReplicaLoad`]), and the replica answers with its own.

use serde::{Deserialize, Serialize};

use crate::endpoint::Endpoint;
use crate::prefix::{MAX_RECORD_HASHES, PrefixRecord};
use crate::router::PodLoad;
use crate::scoring::ReplicaPlace;

/// Most pods one digest may list loads for.
pub const MAX_DIGEST_PODS: usize = 16_384;

/// Prefix records and per-pod load: one replica's since its last report (its answer to
/// a push), or the other replicas' (inside a snapshot).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicaDigest {
    /// Oldest first.
    #[serde(default)]
    pub records: Vec<PrefixRecord>,
    #[serde(default)]
    pub load: Vec<PeerLoad>,
    /// In a snapshot: how many gateway replicas the agent pushes to, this one
    /// included. 0 in a replica's report, and from an agent older than the field.
    #[serde(default)]
    pub replicas: u32,
    /// In a snapshot: this replica's place among them, `0..replicas`, stable while the
    /// set of replicas stays (the agent's push order). Absent in a replica's report
    /// and from an agent older than the field: the replica then has no share of the
    /// pods, rather than every replica taking the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
}

/// One pod's load as one or several replicas count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerLoad {
    pub pod: Endpoint,
    pub in_flight: u32,
    pub pending_prefill_tokens: u64,
}

impl PeerLoad {
    pub fn load(&self) -> PodLoad {
        PodLoad { in_flight: self.in_flight, pending_prefill_tokens: self.pending_prefill_tokens }
    }

    /// What a replica reports of its own load: each of `pods` that has any, as
    /// `load_of` counts it.
    pub fn busy(pods: impl Iterator<Item = Endpoint>, load_of: impl Fn(Endpoint) -> PodLoad) -> Vec<PeerLoad> {
        pods.map(|pod| (pod, load_of(pod)))
            .filter(|(_, load)| load.in_flight > 0 || load.pending_prefill_tokens > 0)
            .map(|(pod, load)| PeerLoad {
                pod,
                in_flight: load.in_flight,
                pending_prefill_tokens: load.pending_prefill_tokens,
            })
            .collect()
    }
}

/// Load per pod between snapshots: what the agent pushes a replica (the other
/// replicas' load, summed) and what the replica answers (its own).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicaLoad {
    #[serde(default)]
    pub load: Vec<PeerLoad>,
}

/// Why a load message was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LoadError {
    #[error("replica load is not valid MessagePack for this schema: {0}")]
    Decode(String),
    #[error("replica load lists {found} pods, more than the limit of {MAX_DIGEST_PODS}")]
    TooManyPods { found: usize },
}

impl ReplicaLoad {
    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).unwrap_or_default()
    }

    /// Decodes and bounds untrusted bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, LoadError> {
        let message: Self = rmp_serde::from_slice(bytes).map_err(|e| LoadError::Decode(e.to_string()))?;
        if message.load.len() > MAX_DIGEST_PODS {
            return Err(LoadError::TooManyPods { found: message.load.len() });
        }
        Ok(message)
    }
}

/// Why a digest was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DigestError {
    #[error("replica digest is not valid MessagePack for this schema: {0}")]
    Decode(String),
    #[error("replica digest carries {found} prefix hashes, more than the limit of {MAX_RECORD_HASHES}")]
    TooManyHashes { found: usize },
    #[error("replica digest lists the load of {found} pods, more than the limit of {MAX_DIGEST_PODS}")]
    TooManyPods { found: usize },
}

impl ReplicaDigest {
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.load.is_empty()
    }

    /// This replica's place among the replicas, when the agent said it and it is one
    /// of them; otherwise a lone gateway's, which has no share of the pods.
    pub fn place(&self) -> ReplicaPlace {
        match self.index {
            Some(index) if index < self.replicas => ReplicaPlace { replicas: self.replicas, index },
            _ => ReplicaPlace::ALONE,
        }
    }

    pub fn hash_count(&self) -> usize {
        self.records.iter().map(|r| r.hashes.len()).sum()
    }

    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).unwrap_or_default()
    }

    /// Decodes and bounds untrusted bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, DigestError> {
        let digest: Self = rmp_serde::from_slice(bytes).map_err(|e| DigestError::Decode(e.to_string()))?;
        digest.check()?;
        Ok(digest)
    }

    /// The bounds a snapshot's digest must also keep.
    pub fn check(&self) -> Result<(), DigestError> {
        let hashes = self.hash_count();
        if hashes > MAX_RECORD_HASHES {
            return Err(DigestError::TooManyHashes { found: hashes });
        }
        if self.load.len() > MAX_DIGEST_PODS {
            return Err(DigestError::TooManyPods { found: self.load.len() });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(port: u16) -> Endpoint {
        format!("10.0.0.1:{port}").parse().unwrap()
    }

    #[test]
    fn round_trips_and_refuses_garbage_and_oversize() {
        let digest = ReplicaDigest {
            records: vec![PrefixRecord::blocks(pod(1), vec![3, 4])],
            load: vec![PeerLoad { pod: pod(2), in_flight: 5, pending_prefill_tokens: 900 }],
            replicas: 3,
            index: Some(2),
        };
        assert_eq!(ReplicaDigest::decode(&digest.encode()), Ok(digest));
        assert!(matches!(ReplicaDigest::decode(b"\xc1nope"), Err(DigestError::Decode(_))));
        let huge = ReplicaDigest {
            records: vec![PrefixRecord::blocks(pod(1), vec![1; MAX_RECORD_HASHES + 1])],
            ..ReplicaDigest::default()
        };
        assert_eq!(
            ReplicaDigest::decode(&huge.encode()),
            Err(DigestError::TooManyHashes { found: MAX_RECORD_HASHES + 1 })
        );
    }

    #[test]
    fn a_place_is_taken_only_when_the_agent_says_it() {
        let with = |replicas, index| ReplicaDigest { replicas, index, ..ReplicaDigest::default() };
        assert_eq!(with(3, Some(1)).place(), ReplicaPlace { replicas: 3, index: 1 });
        // An agent older than `index`, or one that names a place outside the count.
        assert_eq!(with(3, None).place(), ReplicaPlace::ALONE);
        assert_eq!(with(3, Some(3)).place(), ReplicaPlace::ALONE);
        let older = ReplicaDigest::decode(&with(3, None).encode()).unwrap();
        assert_eq!((older.replicas, older.index), (3, None));
    }

    #[test]
    fn a_load_message_round_trips_and_refuses_garbage_and_oversize() {
        let message = ReplicaLoad { load: vec![PeerLoad { pod: pod(2), in_flight: 5, pending_prefill_tokens: 900 }] };
        assert_eq!(ReplicaLoad::decode(&message.encode()), Ok(message));
        assert!(matches!(ReplicaLoad::decode(b"\xc1nope"), Err(LoadError::Decode(_))));
        let load = vec![PeerLoad { pod: pod(1), in_flight: 1, pending_prefill_tokens: 1 }; MAX_DIGEST_PODS + 1];
        let huge = ReplicaLoad { load }.encode();
        assert_eq!(ReplicaLoad::decode(&huge), Err(LoadError::TooManyPods { found: MAX_DIGEST_PODS + 1 }));
    }

    #[test]
    fn an_empty_message_is_an_empty_digest() {
        // What an older agent or filter sends: a map without either field.
        let empty = rmp_serde::to_vec_named(&std::collections::BTreeMap::<String, u8>::new()).unwrap();
        assert_eq!(ReplicaDigest::decode(&empty), Ok(ReplicaDigest::default()));
        assert!(ReplicaDigest::default().is_empty());
    }
}
