//! Active-active gateways: passes each replica's digest (its prefix records and load,
//! its answer to a push) on to the other replicas with their next snapshot, so that any
//! replica routes a conversation's next turn to the pod that holds it and counts every
//! replica's requests. `infergate_core::replicas` has the wire types and
//! `docs/replicas.md` the trade-offs.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use infergate_core::prefix::{MAX_RECORD_HASHES, PrefixRecord};
use infergate_core::replicas::{MAX_DIGEST_PODS, PeerLoad, ReplicaDigest};

/// One replica's mail and news.
#[derive(Debug, Default)]
struct Replica {
    target: String,
    /// The other replicas' records not yet sent to this one, oldest first.
    inbox: VecDeque<PrefixRecord>,
    inbox_hashes: usize,
    /// What this replica last said it has in flight, and when.
    load: Vec<PeerLoad>,
    load_at: Option<Instant>,
    /// Pushes that failed in a row; from [`PUSH_FAILURES_TO_LOSE_PLACE`] it has no place
    /// among the replicas until one succeeds.
    failed_pushes: u32,
}

impl Replica {
    fn has_place(&self) -> bool {
        self.failed_pushes < PUSH_FAILURES_TO_LOSE_PLACE
    }
}

/// Failed pushes in a row after which a replica gives its share of the pods up: more
/// than one, so that a single timeout does not deal every replica's share again.
const PUSH_FAILURES_TO_LOSE_PLACE: u32 = 2;

/// The exchange between the replicas the agent pushes to.
#[derive(Debug)]
pub struct ReplicaExchange {
    replicas: Vec<Replica>,
    /// A replica's load older than this (it stopped answering) counts no more.
    load_max_age: Duration,
    /// Records dropped because an inbox was full: a replica that cannot be reached.
    dropped: u64,
}

impl ReplicaExchange {
    pub fn new(load_max_age: Duration) -> Self {
        Self { replicas: Vec::new(), load_max_age, dropped: 0 }
    }

    /// The replicas, in the pusher's target order. A replica that stays keeps its
    /// inbox and load; a new one starts with nothing: it learns from the next digests.
    pub fn set_targets(&mut self, targets: &[String]) {
        if self.replicas.iter().map(|r| &r.target).eq(targets.iter()) {
            return;
        }
        let mut old = std::mem::take(&mut self.replicas);
        self.replicas = targets
            .iter()
            .map(|target| match old.iter().position(|r| r.target == *target) {
                Some(i) => old.swap_remove(i),
                None => Replica { target: target.clone(), ..Replica::default() },
            })
            .collect();
    }

    /// What replica `index` is told with its next snapshot: the others' records since its
    /// last snapshot (taken from its inbox: if the push fails, they are lost, and the
    /// conversations concerned find their pod again from that replica's own decisions)
    /// and the others' summed load. Empty with one replica.
    ///
    /// The count and the place, which deal the pods into shares, are among the replicas
    /// whose pushes succeed: a replica whose last two pushes failed gives its share up
    /// at the next push, and is told no place (so has no share) until one succeeds and
    /// it is pushed to again.
    pub fn outgoing(&mut self, index: usize, now: Instant) -> ReplicaDigest {
        let load = self.load_for(index, now);
        let live = self.replicas.iter().filter(|r| r.has_place()).count();
        let place = self.replicas.iter().take(index).filter(|r| r.has_place()).count();
        let Some(replica) = self.replicas.get_mut(index) else { return ReplicaDigest::default() };
        replica.inbox_hashes = 0;
        ReplicaDigest {
            records: replica.inbox.drain(..).collect(),
            load,
            replicas: u32::try_from(live.max(1)).unwrap_or(u32::MAX),
            index: if replica.has_place() { u32::try_from(place).ok() } else { None },
        }
    }

    /// Whether a push to replica `index` succeeded (see [`Self::outgoing`]).
    pub fn pushed(&mut self, index: usize, ok: bool) {
        if let Some(replica) = self.replicas.get_mut(index) {
            replica.failed_pushes = if ok { 0 } else { replica.failed_pushes.saturating_add(1) };
        }
    }

    /// Replica `index` answered a push sent at `sent` with `digest`: its records go to
    /// every other replica's inbox, and its load replaces what it said before, unless
    /// a load push answered since (`Self::loaded`) said newer.
    pub fn incoming(&mut self, index: usize, digest: ReplicaDigest, sent: Instant) {
        let ReplicaDigest { records, load, .. } = digest;
        for (i, replica) in self.replicas.iter_mut().enumerate() {
            if i == index {
                if replica.load_at.is_none_or(|at| at <= sent) {
                    replica.load = load.clone();
                    replica.load_at = Some(sent);
                }
                continue;
            }
            for record in &records {
                replica.inbox_hashes += record.hashes.len();
                replica.inbox.push_back(record.clone());
            }
            // Bounded as a snapshot's digest is: the oldest go first.
            while replica.inbox_hashes > MAX_RECORD_HASHES {
                let Some(oldest) = replica.inbox.pop_front() else { break };
                replica.inbox_hashes -= oldest.hashes.len();
                self.dropped += 1;
            }
        }
    }

    /// The replicas' snapshot push targets, in order.
    pub fn targets(&self) -> impl Iterator<Item = &str> {
        self.replicas.iter().map(|r| r.target.as_str())
    }

    /// Replica `index` answered a load push with its load: it replaces what it said.
    pub fn loaded(&mut self, index: usize, load: Vec<PeerLoad>, now: Instant) {
        if let Some(replica) = self.replicas.get_mut(index) {
            replica.load = load;
            replica.load_at = Some(now);
        }
    }

    /// Records dropped so far because a replica's inbox was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Every other replica's recent load, summed per pod: what replica `index` is told
    /// with its snapshot ([`Self::outgoing`]) and by a load push between snapshots.
    pub fn load_for(&self, index: usize, now: Instant) -> Vec<PeerLoad> {
        let mut sums: Vec<PeerLoad> = Vec::new();
        let recent = |r: &&Replica| r.load_at.is_some_and(|at| now.saturating_duration_since(at) <= self.load_max_age);
        let others = self.replicas.iter().enumerate().filter(|(i, _)| *i != index).map(|(_, r)| r);
        for load in others.filter(recent).flat_map(|r| &r.load) {
            if let Some(sum) = sums.iter_mut().find(|s| s.pod == load.pod) {
                sum.in_flight = sum.in_flight.saturating_add(load.in_flight);
                sum.pending_prefill_tokens = sum.pending_prefill_tokens.saturating_add(load.pending_prefill_tokens);
            } else if sums.len() < MAX_DIGEST_PODS {
                sums.push(*load);
            }
        }
        sums
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infergate_core::endpoint::Endpoint;

    fn pod(port: u16) -> Endpoint {
        format!("10.0.0.1:{port}").parse().unwrap()
    }

    fn targets(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("http://10.1.0.{i}:9902/v1/snapshot")).collect()
    }

    fn record(port: u16, hashes: usize) -> PrefixRecord {
        PrefixRecord::blocks(pod(port), vec![7; hashes])
    }

    fn load(port: u16, in_flight: u32) -> PeerLoad {
        PeerLoad { pod: pod(port), in_flight, pending_prefill_tokens: u64::from(in_flight) * 100 }
    }

    #[test]
    fn a_replicas_records_reach_every_other_replica_once() {
        let now = Instant::now();
        let mut exchange = ReplicaExchange::new(Duration::from_secs(1));
        exchange.set_targets(&targets(3));
        exchange.incoming(
            0,
            ReplicaDigest { records: vec![record(1, 4)], load: Vec::new(), replicas: 0, index: None },
            now,
        );
        assert_eq!(exchange.outgoing(0, now).records, []);
        assert_eq!(exchange.outgoing(1, now).records, [record(1, 4)]);
        assert_eq!(exchange.outgoing(1, now).records, [], "delivered once");
        assert_eq!(exchange.outgoing(2, now).records, [record(1, 4)]);
    }

    #[test]
    fn a_load_answer_replaces_the_replicas_load_for_the_others() {
        let now = Instant::now();
        let mut exchange = ReplicaExchange::new(Duration::from_secs(1));
        exchange.set_targets(&targets(3));
        exchange.loaded(0, vec![load(1, 2)], now);
        exchange.loaded(1, vec![load(1, 3), load(2, 1)], now);
        assert_eq!(exchange.load_for(2, now), [load(1, 5), load(2, 1)]);
        assert_eq!(exchange.load_for(0, now), [load(1, 3), load(2, 1)], "not its own");
        exchange.loaded(1, Vec::new(), now);
        assert_eq!(exchange.load_for(2, now), [load(1, 2)], "replaced, not added");
        assert_eq!(exchange.load_for(2, now + Duration::from_secs(2)), [], "too old to count");
        assert_eq!(exchange.targets().count(), 3);
    }

    #[test]
    fn a_snapshot_answer_does_not_replace_a_newer_load_answer() {
        let sent = Instant::now();
        let mut exchange = ReplicaExchange::new(Duration::from_secs(1));
        exchange.set_targets(&targets(2));
        exchange.loaded(0, vec![load(1, 5)], sent + Duration::from_millis(3));
        let digest = ReplicaDigest { load: vec![load(1, 2)], ..ReplicaDigest::default() };
        exchange.incoming(0, digest.clone(), sent);
        assert_eq!(exchange.load_for(1, sent + Duration::from_millis(4)), [load(1, 5)]);
        exchange.incoming(0, digest, sent + Duration::from_millis(10));
        assert_eq!(exchange.load_for(1, sent + Duration::from_millis(11)), [load(1, 2)]);
    }

    #[test]
    fn each_replica_is_told_the_count_and_its_own_place() {
        let now = Instant::now();
        let mut exchange = ReplicaExchange::new(Duration::from_secs(1));
        exchange.set_targets(&targets(3));
        let places: Vec<(u32, u32)> = (0..3)
            .map(|i| exchange.outgoing(i, now))
            .map(|digest| (digest.replicas, digest.index.unwrap_or(u32::MAX)))
            .collect();
        assert_eq!(places, [(3, 0), (3, 1), (3, 2)]);
    }

    #[test]
    fn a_replica_whose_push_fails_gives_up_its_place_until_one_succeeds() {
        let now = Instant::now();
        let mut exchange = ReplicaExchange::new(Duration::from_secs(1));
        exchange.set_targets(&targets(3));
        let places = |exchange: &mut ReplicaExchange| -> Vec<(u32, Option<u32>)> {
            (0..3).map(|i| exchange.outgoing(i, now)).map(|digest| (digest.replicas, digest.index)).collect()
        };
        let all_three = [(3, Some(0)), (3, Some(1)), (3, Some(2))];
        exchange.pushed(1, false);
        assert_eq!(places(&mut exchange), all_three, "one failure deals nothing again");
        exchange.pushed(1, false);
        assert_eq!(places(&mut exchange), [(2, Some(0)), (2, None), (2, Some(1))]);
        exchange.pushed(1, true);
        assert_eq!(places(&mut exchange), all_three);
        // With every push failing, each is told it is alone: no shares.
        for _ in 0..2 {
            (0..3).for_each(|i| exchange.pushed(i, false));
        }
        assert_eq!(places(&mut exchange), [(1, None); 3]);
    }

    #[test]
    fn each_replica_is_told_the_others_load_summed_until_it_ages_out() {
        let now = Instant::now();
        let mut exchange = ReplicaExchange::new(Duration::from_secs(1));
        exchange.set_targets(&targets(3));
        exchange.incoming(
            0,
            ReplicaDigest { records: Vec::new(), load: vec![load(1, 2), load(2, 1)], replicas: 0, index: None },
            now,
        );
        exchange.incoming(
            1,
            ReplicaDigest { records: Vec::new(), load: vec![load(1, 3)], replicas: 0, index: None },
            now,
        );
        assert_eq!(exchange.outgoing(2, now).load, [load(1, 5), load(2, 1)]);
        assert_eq!(exchange.outgoing(0, now).load, [load(1, 3)], "not its own");
        // Replica 1 answers again with nothing in flight: its old load goes.
        exchange.incoming(1, ReplicaDigest::default(), now);
        assert_eq!(exchange.outgoing(2, now).load, [load(1, 2), load(2, 1)]);
        // Replica 0 stops answering: after a second its load counts no more.
        assert_eq!(exchange.outgoing(2, now + Duration::from_millis(1_001)).load, []);
    }

    #[test]
    fn an_unreachable_replicas_inbox_keeps_only_the_newest_records() {
        let now = Instant::now();
        let mut exchange = ReplicaExchange::new(Duration::from_secs(1));
        exchange.set_targets(&targets(2));
        let batch = MAX_RECORD_HASHES / 4;
        for port in 0..6 {
            exchange.incoming(
                0,
                ReplicaDigest { records: vec![record(port, batch)], load: Vec::new(), replicas: 0, index: None },
                now,
            );
        }
        let kept: Vec<u16> = exchange.outgoing(1, now).records.iter().map(|r| r.pod.port()).collect();
        assert_eq!(kept, [2, 3, 4, 5]);
        assert_eq!(exchange.dropped(), 2);
    }

    #[test]
    fn replicas_that_stay_keep_their_mail_when_others_come_and_go() {
        let now = Instant::now();
        let mut exchange = ReplicaExchange::new(Duration::from_secs(1));
        exchange.set_targets(&targets(2));
        exchange.incoming(
            0,
            ReplicaDigest { records: vec![record(1, 1)], load: vec![load(1, 1)], replicas: 0, index: None },
            now,
        );
        let mut changed = targets(3);
        changed.swap(0, 2);
        exchange.set_targets(&changed);
        // Replica 1 kept its inbox; replica 0, now last, kept its load.
        assert_eq!(exchange.outgoing(1, now).records, [record(1, 1)]);
        assert_eq!(exchange.outgoing(0, now).load, [load(1, 1)]);
        assert_eq!(exchange.outgoing(0, now).records, [], "the new replica starts with nothing");
    }
}
