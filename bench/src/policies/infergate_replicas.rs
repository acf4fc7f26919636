//! infergate behind several gateway replicas, in virtual time: one [`Infergate`] router
//! per replica, each with its own ledger and prefix index, exchanging what the agent
//! carries between them (`docs/replicas.md`). At each scrape every replica adopts the
//! snapshot with the others' last digests (their prefix claims and their load per pod,
//! the replica count and its own place), then reports its own digest, which the others
//! get with the next scrape: a replica answers each push with its digest, and the
//! agent delivers it with the next push. Requests reach the replicas as part 2's
//! client sends them: a conversation's first turn to replica `id mod N`, each next turn
//! to the replica after the previous turn's.
//!
//! What this leaves out, and part 2 has: the push's and the request's transit times,
//! and the replicas' workers (each replica here is one router, as each Envoy's workers
//! share their counts at once). So it measures what the exchange's lag alone costs:
//! requests that reach two replicas within one scrape interval are decided blind to
//! each other.

use std::collections::HashMap;

use infergate_core::prefix::PrefixRecord;
use infergate_core::replicas::{PeerLoad, ReplicaDigest};
use infergate_core::router::LoadLedger;

use super::{Infergate, PickContext, Policy};
use crate::fleet::{FleetConfig, ScrapeView};
use crate::request::{Arrival, BenchRequest};

pub struct InfergateReplicas {
    replicas: Vec<Replica>,
    /// Per request, the replica that routed it.
    routed_by: HashMap<usize, usize>,
}

struct Replica {
    router: Infergate,
    /// The prefix claims it made since its last digest.
    outbox: Vec<PrefixRecord>,
    /// Its last digest, delivered to the others with the next snapshot.
    reported: ReplicaDigest,
}

impl InfergateReplicas {
    /// `replicas` routers; one is infergate as a lone gateway.
    pub fn new(fleet: &FleetConfig, seed: u64, replicas: usize) -> Self {
        let replicas = (0..replicas.max(1))
            .map(|r| Replica {
                router: Infergate::new(fleet, seed.wrapping_add(r as u64)),
                outbox: Vec::new(),
                reported: ReplicaDigest::default(),
            })
            .collect();
        Self { replicas, routed_by: HashMap::new() }
    }

    /// Part 2's client: first turns by id, each next turn to the next replica.
    fn replica_for(&self, id: usize, request: &BenchRequest) -> usize {
        let n = self.replicas.len();
        match request.arrival {
            Arrival::After { previous, .. } => self.routed_by.get(&previous).map_or(id % n, |r| (r + 1) % n),
            Arrival::At(_) => id % n,
        }
    }

    /// What the agent's next push brings `replica`: the others' last digests, their
    /// loads summed per pod, and its place.
    fn peers_of(&self, replica: usize) -> ReplicaDigest {
        let mut records = Vec::new();
        let mut load: Vec<PeerLoad> = Vec::new();
        for (_, other) in self.replicas.iter().enumerate().filter(|(r, _)| *r != replica) {
            records.extend(other.reported.records.iter().cloned());
            for peer in &other.reported.load {
                match load.iter_mut().find(|l| l.pod == peer.pod) {
                    Some(sum) => {
                        sum.in_flight += peer.in_flight;
                        sum.pending_prefill_tokens += peer.pending_prefill_tokens;
                    }
                    None => load.push(*peer),
                }
            }
        }
        ReplicaDigest { records, load, replicas: self.replicas.len() as u32, index: Some(replica as u32) }
    }
}

impl Replica {
    /// Its answer to a push: the claims since the last answer, and its load per pod.
    fn report(&mut self) {
        let ledger = &self.router.ledger;
        let load = self
            .router
            .endpoints
            .iter()
            .map(|&pod| (pod, ledger.load(pod)))
            .filter(|(_, l)| l.in_flight > 0 || l.pending_prefill_tokens > 0)
            .map(|(pod, l)| PeerLoad { pod, in_flight: l.in_flight, pending_prefill_tokens: l.pending_prefill_tokens })
            .collect();
        self.reported = ReplicaDigest { records: std::mem::take(&mut self.outbox), load, replicas: 0, index: None };
    }
}

impl Policy for InfergateReplicas {
    fn name(&self) -> &'static str {
        "infergate_replicas"
    }

    fn on_scrape(&mut self, scrape: &ScrapeView, now: f64) {
        if let [only] = self.replicas.as_mut_slice() {
            only.router.on_scrape(scrape, now);
            return;
        }
        let deliveries: Vec<ReplicaDigest> = (0..self.replicas.len()).map(|r| self.peers_of(r)).collect();
        for (replica, peers) in self.replicas.iter_mut().zip(deliveries) {
            for record in &peers.records {
                replica.router.router.record_peer(record);
            }
            let mut snapshot = scrape.snapshot.clone();
            snapshot.peers = peers;
            replica.router.router.apply_snapshot(snapshot, &replica.router.ledger);
            replica.report();
        }
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        let r = self.replica_for(ctx.id, ctx.request);
        self.routed_by.insert(ctx.id, r);
        let Some(replica) = self.replicas.get_mut(r) else { return 0 };
        let pod = replica.router.pick(ctx);
        if let Some(claim) = replica.router.claim(ctx.id) {
            replica.outbox.push(claim);
        }
        pod
    }

    fn on_first_token(&mut self, id: usize, pod: usize, request: &BenchRequest, at: f64) {
        if let Some(replica) = self.routed_by.get(&id).and_then(|&r| self.replicas.get_mut(r)) {
            replica.router.on_first_token(id, pod, request, at);
        }
    }

    fn on_finish(&mut self, id: usize, pod: usize) {
        if let Some(replica) = self.routed_by.get(&id).and_then(|&r| self.replicas.get_mut(r)) {
            replica.router.on_finish(id, pod);
        }
    }
}
