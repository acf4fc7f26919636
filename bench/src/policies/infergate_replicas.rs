//! infergate behind several gateway replicas, in virtual time: one [`Infergate`] router
//! per replica, each with its own ledger and prefix index, exchanging what the agent
//! carries between them (`docs/replicas.md`). At each scrape every replica adopts the
//! snapshot with the others' last digests (their prefix claims and their load per pod,
//! the replica count and its own place), then reports its own digest, which the others
//! get with the next scrape: a replica answers each push with its digest, and the
//! agent delivers it with the next push. The merging is the agent's own
//! (`infergate_metrics_agent::replicas::ReplicaExchange`), on virtual time; the
//! digest is built as the control listener builds it, from the replica's claims and
//! ledger. Requests reach the replicas as part 2's
//! client sends them: a conversation's first turn to replica `id mod N`, each next turn
//! to the replica after the previous turn's.
//!
//! What this leaves out, and part 2 has: the push's and the requests' transit times,
//! the agent's ±10% jitter of its interval and the scrape's own duration; the ≤ 5 ms
//! batching of records between an Envoy's workers and into its outbox; the workers
//! themselves (each replica here is one router, while each Envoy worker keeps its own
//! prefix index and adopts snapshots when it next routes; their counts are shared at
//! once, as here); retries that move a claim to another pod; and failures (every push
//! succeeds here, so no replica loses its place or its load). So it is the exchange
//! as designed, with an instant transport.
//!
//! Between snapshots the agent also pushes each replica the others' load every few
//! milliseconds, staggered (`infergate_metrics_agent::load_exchange`): push `k` goes to
//! replica `k mod N` at `k × interval / N`, carries the others' loads as their last
//! answers said, and is answered with the replica's own. Pushes are made in time order
//! before each event, so a replica's answer is its ledger at the push.
//!
//! Two variants, for comparison only ([`Exchange`]): replicas that exchange but have no
//! shares of the pods, and replicas that see each other's counts at once (one ledger),
//! each routing as a lone gateway over its own prefix index.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use infergate_core::prefix::PrefixRecord;
use infergate_core::replicas::{PeerLoad, ReplicaDigest};
use infergate_core::router::{LoadLedger, LocalLedger};
use infergate_metrics_agent::replicas::ReplicaExchange;

use super::{Infergate, PickContext, Policy};
use crate::fleet::{FleetConfig, ScrapeView};
use crate::request::{Arrival, BenchRequest};

/// What the replicas share, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exchange {
    /// As the agent does: digests at each push, delivered with the next; each replica
    /// told the count and its place, so it has a share of the pods.
    Agent,
    /// The same exchange, but no replica is told its place: no shares.
    AgentWithoutShares,
    /// Every replica counts on one ledger, so each sees the others' requests at once,
    /// and is told it is alone (no shares, no allowance for unseen sends); prefix
    /// records still go through the agent. What no real exchange can do: the bound.
    OneLedger,
}

pub struct InfergateReplicas {
    replicas: Vec<Replica>,
    exchange: Exchange,
    /// The agent's own exchange (`metrics-agent/src/replicas.rs`), on virtual time
    /// counted from `started`.
    agent: ReplicaExchange,
    started: Instant,
    /// The one ledger of [`Exchange::OneLedger`], lent to the replica that routes.
    one_ledger: LocalLedger,
    /// Per request, the replica that routed it (a conversation's next turn goes to the
    /// one after, once the previous turn has finished).
    routed_by: HashMap<usize, usize>,
    /// Seconds between two load pushes to one replica; `None`: snapshots only.
    load_interval: Option<f64>,
    /// The next load push to make (see the module doc), and the time of the last event.
    next_load_push: u64,
    last_event: f64,
}

struct Replica {
    router: Infergate,
    /// The prefix claims it made since its last digest.
    outbox: Vec<PrefixRecord>,
}

impl InfergateReplicas {
    /// `replicas` routers exchanging as the agent does; one is infergate as a lone
    /// gateway.
    pub fn new(fleet: &FleetConfig, seed: u64, replicas: usize) -> Self {
        Self::exchanging(fleet, seed, replicas, Exchange::Agent)
    }

    pub fn exchanging(fleet: &FleetConfig, seed: u64, replicas: usize, exchange: Exchange) -> Self {
        let replicas: Vec<Replica> = (0..replicas.max(1))
            .map(|r| Replica { router: Infergate::new(fleet, seed.wrapping_add(r as u64)), outbox: Vec::new() })
            .collect();
        // Every replica answers every push here, so no load ever ages out.
        let mut agent = ReplicaExchange::new(Duration::from_secs(3_600));
        agent.set_targets(&(0..replicas.len()).map(|r| format!("replica-{r}")).collect::<Vec<_>>());
        Self {
            replicas,
            exchange,
            agent,
            started: Instant::now(),
            one_ledger: LocalLedger::default(),
            routed_by: HashMap::new(),
            load_interval: None,
            next_load_push: 0,
            last_event: 0.0,
        }
    }

    /// Part 2's client: first turns by id, each next turn to the next replica.
    /// Pushes the others' load between snapshots every `interval_s` (virtual seconds)
    /// to each replica, as the agent's load exchange does; `None` (the default) leaves
    /// the loads to the snapshots. Not with one ledger, which needs no exchange.
    pub fn with_load_exchange(mut self, interval_s: Option<f64>) -> Self {
        self.load_interval = interval_s.filter(|s| *s > 0.0 && self.exchange != Exchange::OneLedger);
        self
    }

    /// Makes the load pushes due by `now`, in time order.
    fn exchange_loads_until(&mut self, now: f64) {
        self.last_event = self.last_event.max(now);
        let (Some(interval), n) = (self.load_interval, self.replicas.len()) else { return };
        if n < 2 {
            return;
        }
        let step = interval / n as f64;
        while self.next_load_push as f64 * step <= now {
            let k = self.next_load_push;
            self.next_load_push += 1;
            let (t, r) = (k as f64 * step, (k % n as u64) as usize);
            let at = self.at(t);
            let load = self.agent.load_for(r, at);
            let answer = self.replicas.get_mut(r).map(|replica| {
                replica.router.router.adopt_peer_load(&load, super::infergate::ms(t));
                replica.own_load()
            });
            if let Some(answer) = answer {
                self.agent.loaded(r, answer, at);
            }
        }
    }

    fn replica_for(&self, id: usize, request: &BenchRequest) -> usize {
        let n = self.replicas.len();
        match request.arrival {
            Arrival::After { previous, .. } => self.routed_by.get(&previous).map_or(id % n, |r| (r + 1) % n),
            Arrival::At(_) => id % n,
        }
    }

    /// What the agent's next push brings `replica`: the others' digests since its last
    /// push, as the agent merges them, and the count and its place as the variant
    /// tells them.
    fn next_push(&mut self, replica: usize, now: Instant) -> ReplicaDigest {
        let mut peers = self.agent.outgoing(replica, now);
        match self.exchange {
            Exchange::Agent => {}
            Exchange::AgentWithoutShares => peers.index = None,
            Exchange::OneLedger => (peers.replicas, peers.index) = (1, None),
        }
        peers
    }

    /// Virtual seconds as the agent's clock.
    fn at(&self, now: f64) -> Instant {
        self.started + Duration::from_secs_f64(now.max(0.0))
    }

    /// Runs `f` on replica `r`, with the one ledger lent to it if there is one.
    fn on_replica<T>(&mut self, r: usize, f: impl FnOnce(&mut Replica) -> T) -> Option<T> {
        let one_ledger = self.exchange == Exchange::OneLedger;
        let replica = self.replicas.get_mut(r)?;
        if one_ledger {
            std::mem::swap(&mut self.one_ledger, &mut replica.router.ledger);
        }
        let out = f(replica);
        if one_ledger {
            std::mem::swap(&mut self.one_ledger, &mut replica.router.ledger);
        }
        Some(out)
    }
}

impl Replica {
    /// Its answer to a push: the claims since the last answer, and its load per pod
    /// (none when the replicas count on one ledger: the others see it already).
    fn report(&mut self, with_load: bool) -> ReplicaDigest {
        let load = if with_load { self.own_load() } else { Vec::new() };
        ReplicaDigest { records: std::mem::take(&mut self.outbox), load, replicas: 0, index: None }
    }

    /// Its load on the pods that have any, as the control listener reports it.
    fn own_load(&self) -> Vec<PeerLoad> {
        let ledger = &self.router.ledger;
        self.router
            .endpoints
            .iter()
            .map(|&pod| (pod, ledger.load(pod)))
            .filter(|(_, l)| l.in_flight > 0 || l.pending_prefill_tokens > 0)
            .map(|(pod, l)| PeerLoad { pod, in_flight: l.in_flight, pending_prefill_tokens: l.pending_prefill_tokens })
            .collect()
    }
}

impl Policy for InfergateReplicas {
    fn name(&self) -> &'static str {
        "infergate_replicas"
    }

    fn on_scrape(&mut self, scrape: &ScrapeView, now: f64) {
        self.exchange_loads_until(now);
        let with_load = self.exchange != Exchange::OneLedger;
        let at = self.at(now);
        // As the agent does: every replica's push is built before any answer is read.
        let pushes: Vec<ReplicaDigest> = (0..self.replicas.len()).map(|r| self.next_push(r, at)).collect();
        for (r, peers) in pushes.into_iter().enumerate() {
            let answer = self.on_replica(r, |replica| {
                for record in &peers.records {
                    replica.router.router.record_peer(record);
                }
                let mut snapshot = scrape.snapshot.clone();
                snapshot.peers = peers;
                replica.router.router.apply_snapshot(snapshot, &replica.router.ledger);
                replica.report(with_load)
            });
            if let Some(digest) = answer {
                self.agent.incoming(r, digest, at);
                self.agent.pushed(r, true);
            }
        }
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        self.exchange_loads_until(ctx.now);
        let r = self.replica_for(ctx.id, ctx.request);
        self.routed_by.insert(ctx.id, r);
        self.on_replica(r, |replica| {
            let pod = replica.router.pick(ctx);
            if let Some(claim) = replica.router.claim(ctx.id) {
                replica.outbox.push(claim);
            }
            pod
        })
        .unwrap_or(0)
    }

    fn on_first_token(&mut self, id: usize, pod: usize, request: &BenchRequest, at: f64) {
        self.exchange_loads_until(at);
        if let Some(&r) = self.routed_by.get(&id) {
            self.on_replica(r, |replica| replica.router.on_first_token(id, pod, request, at));
        }
    }

    fn on_finish(&mut self, id: usize, pod: usize) {
        // No time comes with a finish: the pushes due by the last event are made.
        self.exchange_loads_until(self.last_event);
        if let Some(&r) = self.routed_by.get(&id) {
            self.on_replica(r, |replica| replica.router.on_finish(id, pod));
        }
    }
}

#[cfg(test)]
mod tests {
    use infergate_model_sim::engine::{Engine, EngineProfile};

    use super::*;
    use crate::fleet::Scraper;
    use crate::request::render;
    use crate::workloads::BASE_MODEL;

    /// Two replicas in front of four idle pods, scraped at 0.
    struct TwoReplicas {
        engines: Vec<Engine>,
        fleet: FleetConfig,
        scraper: Scraper,
        replicas: InfergateReplicas,
    }

    impl TwoReplicas {
        fn start(load_exchange_s: Option<f64>) -> Self {
            let engines: Vec<Engine> = (0..4).map(|_| Engine::new(EngineProfile::TINY)).collect();
            let fleet = FleetConfig::new(4, &[]);
            let mut scraper = Scraper::new(4);
            let mut replicas = InfergateReplicas::new(&fleet, 42, 2).with_load_exchange(load_exchange_s);
            replicas.on_scrape(&scraper.scrape(&engines, &fleet, 0.0), 0.0);
            Self { engines, fleet, scraper, replicas }
        }

        /// Request 0 (replica 0's) at `now`: the pod it went to.
        fn send_first(&mut self, now: f64) -> infergate_core::Endpoint {
            let request = BenchRequest {
                arrival: Arrival::At(now),
                model: BASE_MODEL.into(),
                adapter: None,
                prompt: render(&[("user", &"a question ".repeat(200))]).into(),
                output_tokens: 10,
                session: None,
            };
            let scrape = self.scraper.scrape(&self.engines, &self.fleet, 0.0);
            let in_flight = [0; 4];
            let ctx = PickContext {
                id: 0,
                request: &request,
                now,
                engines: &self.engines,
                scrape: &scrape,
                in_flight: &in_flight,
            };
            self.fleet.endpoints[self.replicas.pick(&ctx)]
        }
    }

    #[test]
    fn a_replicas_load_reaches_the_others_with_the_next_push() {
        let mut two = TwoReplicas::start(None);
        let pod = two.send_first(0.0);
        let TwoReplicas { engines, fleet, scraper, replicas } = &mut two;
        // Not reported yet: a push now would bring replica 1 nothing.
        let at = replicas.at(0.01);
        assert!(replicas.next_push(1, at).load.is_empty());
        replicas.on_scrape(&scraper.scrape(engines, fleet, 0.05), 0.05);
        let at = replicas.at(0.1);
        let delivered = replicas.next_push(1, at);
        assert_eq!(delivered.load.len(), 1, "{delivered:?}");
        assert_eq!(delivered.load[0].pod, pod);
        assert_eq!(delivered.load[0].in_flight, 1);
        assert!(delivered.load[0].pending_prefill_tokens > 0, "its prefill has not started");
        assert_eq!(delivered.records.len(), 1, "and its claim");
        assert!(replicas.next_push(0, at).load.is_empty(), "a replica is not told its own load");
        assert_eq!((delivered.replicas, delivered.index), (2, Some(1)));
    }

    #[test]
    fn with_the_load_exchange_a_replicas_load_reaches_the_agent_with_its_next_load_push() {
        // Pushes every 5 ms, staggered: replica 0 at 0, 5, 10 ms…, replica 1 at 2.5,
        // 7.5 ms…. Replica 0's request at 1 ms is in its answer at 5 ms, not before, and
        // replica 1 is told at 7.5 ms, 45 ms before the next scrape.
        let mut two = TwoReplicas::start(Some(0.005));
        let pod = two.send_first(0.001);
        let replicas = &mut two.replicas;
        replicas.exchange_loads_until(0.004);
        assert!(replicas.agent.load_for(1, replicas.at(0.004)).is_empty(), "known before replica 0 answered");
        replicas.exchange_loads_until(0.0075);
        let told = replicas.agent.load_for(1, replicas.at(0.0075));
        assert_eq!(told.iter().map(|l| (l.pod, l.in_flight)).collect::<Vec<_>>(), [(pod, 1)]);
        assert_eq!(replicas.next_load_push, 4, "pushes at 0, 2.5, 5 and 7.5 ms");
    }
}
