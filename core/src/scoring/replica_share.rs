//! Keeps several gateway replicas from piling onto the same pod: each prefers its own
//! share of the pods.
//!
//! Replicas route on the same snapshot and cannot see each other's new requests until
//! the next exchange (one to two push intervals). Deciding alike, they send requests
//! that arrive together at different replicas to the same cheapest pod: behind three
//! replicas, part 2's shared-prefix traces showed runs of 3–5 cold 7,200-token
//! prefills sent to one idle pod within 40 ms, each predicted with no queue and served
//! 0.4–1.4 s later; 26–35 of the run's 38–53 requests over 600 ms came within 50 ms of
//! another replica's request to the same pod, too soon for any exchange to tell.
//!
//! So each pool's ready pods, in the order of their addresses' hashes, are dealt to the
//! replicas like cards (the agent tells each replica its place) when a snapshot is
//! adopted, and on a pod dealt to another replica a request costs one more prefill of
//! its own, the wait one request like it, sent there by that replica at the same
//! moment, would add. Cold requests arriving
//! together at different replicas then start on different pods. The owner of a real
//! prefix match (as `keep_with_owner` counts one: not a short shared preamble) pays
//! nothing more whoever it was dealt to: requests that share a prefix belong together,
//! and a conversation's next turn goes back to its pod from any replica. A share whose
//! pods are busy spills to the others'. One gateway sees every request it sends and
//! keeps its exact ranking, and so does a replica whose agent does not say its place.
//! Only the `predicted-ttft` scoring mode has shares.
//!
//! Tried before this: randomising among the pods within part of a prefill of the
//! cheapest (3 replicas: TTFT p90 689 ms against 743 without), and having replica `i`
//! assume the `i` before it had each just sent a request to the cheapest pod (679 ms):
//! replicas' views differ by up to a push interval, so neither kept them apart. With
//! the shares, three runs each (BENCHMARKS.md part 2): shared-prefix p90 442–548 ms
//! with 2 replicas and 489–585 ms with 3, against 409–425 ms for one gateway and
//! 651–779 ms with 2–3 replicas before. The trace replay, whose prompts all start
//! with the same block, needed owners to be real ones: 3 replicas 3,353 ms without
//! shares, 3,045 ms with shares that exempted every holder of that block, 2,540 ms
//! now, against 2,096 ms for one gateway (one run each).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use super::prefix_affinity::{has_real_owner, is_prefix_owner};
use super::{Candidate, RequestShape, TtftBreakdown};
use crate::endpoint::Endpoint;
use crate::snapshot::PoolState;

/// What a request pays on a pod of another replica's share, in its own prefills there.
pub const OTHER_SHARE_PREFILLS: f64 = 1.0;
/// The same while the agent pushes the other replicas' load between snapshots: only
/// the last push interval (5 ms by default) is blind, so the price mostly keeps
/// requests arriving at the same moment apart. In the discrete-event model of three
/// replicas (shared-prefix, 12 request sets, pushes every 5 ms) TTFT p90 was 485 ms
/// with no price, 461 ms at half a prefill, 466-478 ms at 0.2-0.3 and 505 ms at a
/// whole one (`bench/examples/des_replicas.rs`); one gateway, 436 ms.
pub const OTHER_SHARE_PREFILLS_PUSHED: f64 = 0.5;
/// Added to [`OTHER_SHARE_PREFILLS_PUSHED`] in proportion to how bursty the traffic is:
/// the share of a replica's requests that come within a push interval of the one
/// before (`router::Router`). Requests that arrive at the same instant at several
/// replicas are decided blind, however often loads are pushed, and the first of a
/// burst at each replica cannot know it is one; the higher price keeps each replica to
/// its own pods then. In the discrete-event model of three replicas over 1,800 s of the
/// conversation trace at 1.5/2/2.5× (bench/examples/des_replicas.rs): TTFT p90 1.41/
/// 1.40/1.43 times one gateway's with neither this nor the burst guess
/// (`router::candidates::BurstGuess`), 1.31/1.30/1.37 with the guess, 1.21/1.21/1.28
/// with both; shared-prefix, whose arrivals are spread, does not move (404 ms p90 with
/// three replicas, 385 ms with one, 12 request sets).
pub const BURST_SHARE_PREFILLS: f64 = 1.5;

/// A replica's place among the gateway replicas, as the agent tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaPlace {
    /// The replicas, this one included.
    pub replicas: u32,
    /// This one's, `0..replicas`.
    pub index: u32,
}

impl ReplicaPlace {
    /// One gateway: no shares.
    pub const ALONE: Self = Self { replicas: 1, index: 0 };
}

/// The pods dealt to the other replicas, per pool (a pod may serve two pools, dealt
/// in each): every replica deals each pool's ready pods alike, from the same
/// snapshot, so their shares do not overlap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OtherShares(HashMap<String, HashSet<Endpoint>>);

impl OtherShares {
    /// Deals each pool's ready pods, in the order of their addresses' hashes, to the
    /// replicas in turn. Alone, or at a place outside the count, nothing is another's.
    pub fn deal(pools: &[PoolState], place: ReplicaPlace) -> Self {
        let ReplicaPlace { replicas, index } = place;
        if replicas <= 1 || index >= replicas {
            return Self::default();
        }
        let mut others = HashMap::new();
        let mut order: Vec<(u64, Endpoint)> = Vec::new();
        for pool in pools {
            order.clear();
            order.extend(pool.pods.iter().filter(|p| p.ready).map(|p| (address_hash(p.address), p.address)));
            order.sort_unstable();
            let dealt = order.iter().enumerate().map(|(i, &(_, pod))| (i as u64 % u64::from(replicas), pod));
            let theirs: HashSet<Endpoint> =
                dealt.filter(|&(to, _)| to != u64::from(index)).map(|(_, pod)| pod).collect();
            others.insert(pool.name.clone(), theirs);
        }
        Self(others)
    }

    /// Whether no pod is another replica's (alone, or not told its place).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `pod` of `pool` was dealt to another replica.
    pub fn contains(&self, pool: &str, pod: Endpoint) -> bool {
        self.0.get(pool).is_some_and(|theirs| theirs.contains(&pod))
    }
}

/// Lowers, in `totals` (negated costs, higher is better), the candidates of `pool`
/// dealt to other replicas by `prefills` ([`OTHER_SHARE_PREFILLS`] or
/// [`OTHER_SHARE_PREFILLS_PUSHED`]) times their `breakdowns`' prefill; the owners of a
/// real prefix match of `shape` are left as they are.
pub fn prefer_own_share(
    candidates: &[Candidate],
    breakdowns: &[TtftBreakdown],
    shape: &RequestShape,
    (others, pool): (&OtherShares, &str),
    (prefills, totals): (f64, &mut [f64]),
) {
    if others.0.is_empty() {
        return;
    }
    let real_owner = has_real_owner(shape);
    for ((c, breakdown), total) in candidates.iter().zip(breakdowns).zip(totals.iter_mut()) {
        let owner = real_owner && is_prefix_owner(c.matched_blocks, shape.best_matched_blocks);
        if !owner && others.contains(pool, c.endpoint) {
            *total -= prefills * breakdown.prefill_ms;
        }
    }
}

/// A hash of the pod's address that every replica computes alike.
fn address_hash(endpoint: Endpoint) -> u64 {
    let (ip, port) = match endpoint.socket_addr() {
        SocketAddr::V4(v4) => (v4.ip().to_ipv6_mapped().octets(), v4.port()),
        SocketAddr::V6(v6) => (v6.ip().octets(), v6.port()),
    };
    let mut bytes = [0u8; 18];
    let (head, tail) = bytes.split_at_mut(16);
    head.copy_from_slice(&ip);
    tail.copy_from_slice(&port.to_be_bytes());
    xxhash_rust::xxh64::xxh64(&bytes, 0)
}

#[cfg(test)]
mod tests {
    use super::super::candidate;
    use super::*;
    use crate::snapshot::PodState;

    fn shape(best_matched_blocks: usize) -> RequestShape {
        RequestShape { prompt_tokens: 7_200.0, tokens_per_block: 16.0, output_tokens: 192.0, best_matched_blocks }
    }

    fn place(replicas: u32, index: u32) -> ReplicaPlace {
        ReplicaPlace { replicas, index }
    }

    fn breakdown(prefill_ms: f64) -> TtftBreakdown {
        TtftBreakdown {
            queue_ms: 0.0,
            kv_wait_ms: 0.0,
            prefill_ms,
            step_ms: 0.0,
            itl_ms: 0.0,
            adapter_ms: 0.0,
            decode_ms: 0.0,
            penalty_ms: 0.0,
            impact_ms: 0.0,
            resident_ms: 0.0,
            evict_ms: 0.0,
            ttft_ms: prefill_ms,
            total_ms: prefill_ms,
        }
    }

    fn pods(n: u16) -> Vec<Candidate> {
        (1..=n).map(|port| candidate(port, 0.0, 0.0, None)).collect()
    }

    /// One pool of the candidates' pods, ready or not, in their order.
    fn pool(candidates: &[Candidate], ready: impl Fn(usize) -> bool) -> Vec<PoolState> {
        let pods = candidates
            .iter()
            .enumerate()
            .map(|(i, c)| PodState {
                address: c.endpoint,
                ready: ready(i),
                role: Default::default(),
                scraped_at_ms: None,
                signals: None,
            })
            .collect();
        vec![PoolState { name: "fleet".into(), pods }]
    }

    /// The pods each replica keeps for itself, by index in `candidates`.
    fn shares(candidates: &[Candidate], replicas: u32) -> Vec<Vec<usize>> {
        let pools = pool(candidates, |_| true);
        (0..replicas)
            .map(|index| {
                let others = OtherShares::deal(&pools, place(replicas, index));
                let own = |c: &Candidate| !others.contains("fleet", c.endpoint);
                (0..candidates.len()).filter(|&i| candidates.get(i).is_some_and(own)).collect()
            })
            .collect()
    }

    /// The replica whose share holds candidate 0, of two.
    fn owner_of_first(candidates: &[Candidate]) -> u32 {
        let dealt = shares(candidates, 2);
        u32::from(!dealt.first().is_some_and(|share| share.contains(&0)))
    }

    #[test]
    fn one_gateway_keeps_its_exact_ranking() {
        let candidates = pods(4);
        assert_eq!(shares(&candidates, 1), vec![vec![0, 1, 2, 3]]);
        assert_eq!(OtherShares::deal(&pool(&candidates, |_| true), place(3, 3)), OtherShares::default());
    }

    #[test]
    fn every_pod_is_dealt_to_exactly_one_replica_evenly() {
        let candidates = pods(8);
        let dealt = shares(&candidates, 3);
        let mut all: Vec<usize> = dealt.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..8).collect::<Vec<_>>());
        let mut sizes: Vec<usize> = dealt.iter().map(Vec::len).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, vec![2, 3, 3]);
    }

    #[test]
    fn the_deal_does_not_depend_on_the_order_pods_are_listed_in() {
        let candidates = pods(8);
        let reversed: Vec<Candidate> = candidates.iter().rev().copied().collect();
        let endpoints = |list: &[Candidate], dealt: Vec<Vec<usize>>| -> Vec<Vec<Endpoint>> {
            dealt
                .into_iter()
                .map(|share| share.into_iter().filter_map(|i| list.get(i).map(|c| c.endpoint)).collect())
                .collect()
        };
        let mut forward = endpoints(&candidates, shares(&candidates, 3));
        let mut backward = endpoints(&reversed, shares(&reversed, 3));
        forward.iter_mut().chain(backward.iter_mut()).for_each(|share| share.sort_unstable());
        assert_eq!(forward, backward);
    }

    #[test]
    fn only_ready_pods_are_dealt() {
        // Two replicas, four pods, the last two not ready: each replica is dealt one of
        // the ready pods, and the others are no replica's.
        let candidates = pods(4);
        let pools = pool(&candidates, |i| i < 2);
        let deals: Vec<OtherShares> = (0..2).map(|index| OtherShares::deal(&pools, place(2, index))).collect();
        let theirs =
            |deal: &OtherShares, i: usize| candidates.get(i).is_some_and(|c| deal.contains("fleet", c.endpoint));
        for deal in &deals {
            assert_eq!((0..2).filter(|&i| theirs(deal, i)).count(), 1, "one ready pod is the other replica's");
            assert!(!theirs(deal, 2) && !theirs(deal, 3), "a pod not ready is dealt to nobody");
        }
        assert!((0..2).all(|i| deals.iter().filter(|d| theirs(d, i)).count() == 1), "each is dealt once");
    }

    #[test]
    fn a_pod_in_two_pools_is_dealt_in_each() {
        let candidates = pods(3);
        let mut pools = pool(&candidates, |_| true);
        let mut second = pools.first().cloned().expect("one pool");
        second.name = "second".into();
        pools.push(second);
        let deal = OtherShares::deal(&pools, place(3, 0));
        for c in &candidates {
            assert_eq!(deal.contains("fleet", c.endpoint), deal.contains("second", c.endpoint));
        }
        assert!(!deal.contains("unknown", candidates.first().expect("3 pods").endpoint));
    }

    #[test]
    fn a_prefix_owner_pays_nothing_more_whoever_it_was_dealt_to() {
        // Two replicas, two pods; pod 0 holds the prompt's 375 shared blocks.
        let mut candidates = pods(2);
        if let Some(owner) = candidates.first_mut() {
            owner.matched_blocks = 375;
        }
        let pools = pool(&candidates, |_| true);
        let breakdowns = [breakdown(75.0), breakdown(330.0)];
        let mut penalised = Vec::new();
        for index in 0..2 {
            let mut totals = vec![-120.0, -330.0];
            let others = OtherShares::deal(&pools, place(2, index));
            prefer_own_share(
                &candidates,
                &breakdowns,
                &shape(375),
                (&others, "fleet"),
                (OTHER_SHARE_PREFILLS, &mut totals),
            );
            assert_eq!(totals.first(), Some(&-120.0), "replica {index}");
            penalised.push(totals.get(1) == Some(&-660.0));
        }
        // The other pod is dealt to one replica: the other one pays its prefill again.
        assert_eq!(penalised.iter().filter(|p| **p).count(), 1);
    }

    #[test]
    fn a_short_shared_preamble_makes_no_owner() {
        // Pod 0 holds only the first 8 blocks (128 tokens) every prompt starts with: not
        // a real match, so it is dealt like any other pod.
        let mut candidates = pods(2);
        if let Some(first) = candidates.first_mut() {
            first.matched_blocks = 8;
        }
        let pools = pool(&candidates, |_| true);
        let breakdowns = [breakdown(330.0); 2];
        let penalised: usize = (0..2)
            .map(|index| {
                let mut totals = vec![-330.0; 2];
                let others = OtherShares::deal(&pools, place(2, index));
                prefer_own_share(
                    &candidates,
                    &breakdowns,
                    &shape(8),
                    (&others, "fleet"),
                    (OTHER_SHARE_PREFILLS, &mut totals),
                );
                totals.iter().filter(|t| **t < -330.0).count()
            })
            .sum();
        assert_eq!(penalised, 2, "each replica pays on the pod dealt to the other");
    }

    #[test]
    fn a_busy_share_spills_to_the_others() {
        // The replica's own pod has a queue of two prefills; another's is idle.
        let candidates = pods(2);
        let breakdowns = [breakdown(300.0); 2];
        let own = owner_of_first(&candidates);
        let others = OtherShares::deal(&pool(&candidates, |_| true), place(2, own));
        let mut totals = vec![-900.0, -300.0];
        prefer_own_share(&candidates, &breakdowns, &shape(0), (&others, "fleet"), (OTHER_SHARE_PREFILLS, &mut totals));
        assert_eq!(totals, vec![-900.0, -600.0]);
    }
}
