#![allow(clippy::indexing_slicing, clippy::unwrap_used)]

use super::*;
use crate::config::{Criticality, Fairness, FlowControlSettings, QueueOrder};

fn ticket(id: u64, band: Criticality, tenant: &str, at: u64) -> Ticket {
    Ticket {
        id,
        band,
        tenant: tenant.to_string(),
        enqueued_ms: at,
        deadline_ms: at + 1_000,
        expires_ms: at + 10_000,
        cost_tokens: 100.0,
    }
}

fn settings(fairness: Fairness, order: QueueOrder) -> FlowControlSettings {
    FlowControlSettings { enabled: true, fairness, order, max_queued: 8, ..Default::default() }
}

/// Releases everything, returning the ids in release order.
fn drain(queue: &mut FlowQueue, settings: &FlowControlSettings) -> Vec<u64> {
    let mut out = Vec::new();
    while let Some(id) = queue.next(settings).map(|t| t.id) {
        queue.take(id).unwrap();
        out.push(id);
    }
    out
}

#[test]
fn higher_bands_go_first_whatever_the_arrival_order() {
    use Criticality::*;
    let s = settings(Fairness::RoundRobin, QueueOrder::FirstCome);
    let mut q = FlowQueue::default();
    for (id, band) in [(1, Sheddable), (2, Standard), (3, Critical), (4, Standard)] {
        assert_eq!(q.offer(ticket(id, band, "a", id), &s), Offer::Queued);
    }
    assert_eq!(drain(&mut q, &s), vec![3, 2, 4, 1]);
}

#[test]
fn round_robin_alternates_tenants_so_a_burst_does_not_delay_the_others() {
    let s = settings(Fairness::RoundRobin, QueueOrder::FirstCome);
    let mut q = FlowQueue::default();
    for id in 1..=4 {
        q.offer(ticket(id, Criticality::Standard, "noisy", id), &s);
    }
    q.offer(ticket(5, Criticality::Standard, "quiet", 5), &s);
    q.offer(ticket(6, Criticality::Standard, "quiet", 6), &s);
    assert_eq!(drain(&mut q, &s), vec![1, 5, 2, 6, 3, 4]);
}

#[test]
fn attained_service_charges_tokens_so_long_requests_count_for_more() {
    let s = settings(Fairness::AttainedService, QueueOrder::FirstCome);
    let mut q = FlowQueue::default();
    let mut long = ticket(1, Criticality::Standard, "long", 1);
    long.cost_tokens = 1_000.0;
    q.offer(long, &s);
    for id in 2..=4 {
        let mut t = ticket(id, Criticality::Standard, "long", id);
        t.cost_tokens = 1_000.0;
        q.offer(t, &s);
    }
    for id in 10..=13 {
        q.offer(ticket(id, Criticality::Standard, "short", id), &s);
    }
    // "long" goes first by name (both at 0), then "short" catches up on 1,000 tokens
    // with its four 100-token requests before "long" gets its second.
    let order = drain(&mut q, &s);
    assert_eq!(order, vec![1, 10, 11, 12, 13, 2, 3, 4]);
}

#[test]
fn a_tenant_that_starts_queueing_late_neither_banks_credit_nor_waits_for_the_others() {
    let s = settings(Fairness::AttainedService, QueueOrder::FirstCome);
    let mut q = FlowQueue::default();
    for id in 1..=3 {
        q.offer(ticket(id, Criticality::Standard, "a", id), &s);
    }
    for _ in 0..2 {
        let id = q.next(&s).unwrap().id;
        q.take(id);
    }
    // "a" has had 200 tokens; "b" joins at "a"'s level, not at 0, so it does not get
    // two turns in a row for having been away.
    q.offer(ticket(4, Criticality::Standard, "b", 4), &s);
    q.offer(ticket(5, Criticality::Standard, "b", 5), &s);
    q.offer(ticket(6, Criticality::Standard, "a", 6), &s);
    assert_eq!(drain(&mut q, &s), vec![3, 4, 6, 5]);
}

#[test]
fn earliest_deadline_lets_a_tight_target_pass_the_tenants_older_requests() {
    let s = settings(Fairness::RoundRobin, QueueOrder::EarliestDeadline);
    let mut q = FlowQueue::default();
    q.offer(ticket(1, Criticality::Standard, "a", 0), &s);
    let mut urgent = ticket(2, Criticality::Standard, "a", 10);
    urgent.deadline_ms = 200;
    q.offer(urgent, &s);
    assert_eq!(drain(&mut q, &s), vec![2, 1]);
    let s = settings(Fairness::RoundRobin, QueueOrder::FirstCome);
    q.offer(ticket(1, Criticality::Standard, "a", 0), &s);
    let mut urgent = ticket(2, Criticality::Standard, "a", 10);
    urgent.deadline_ms = 200;
    q.offer(urgent, &s);
    assert_eq!(drain(&mut q, &s), vec![1, 2]);
}

#[test]
fn a_full_queue_displaces_lower_bands_then_the_busiest_tenant_then_refuses() {
    use Criticality::*;
    let s = FlowControlSettings { max_queued: 4, ..settings(Fairness::RoundRobin, QueueOrder::FirstCome) };
    let mut q = FlowQueue::default();
    q.offer(ticket(1, Sheddable, "a", 1), &s);
    for id in 2..=4 {
        q.offer(ticket(id, Standard, "noisy", id), &s);
    }
    // Full: a standard request takes the sheddable one's place.
    let Offer::QueuedDisplacing(out) = q.offer(ticket(5, Standard, "quiet", 5), &s) else { panic!() };
    assert_eq!(out.id, 1);
    // Full of standard: "noisy" holds 3, "quiet" 1, so quiet's next takes noisy's newest.
    let Offer::QueuedDisplacing(out) = q.offer(ticket(6, Standard, "quiet", 6), &s) else { panic!() };
    assert_eq!(out.id, 4);
    // Now 2 and 2: neither holds two more than the other, so the arrival is refused,
    // and a sheddable one is refused whatever.
    assert_eq!(q.offer(ticket(7, Standard, "quiet", 7), &s), Offer::Refused(Refusal::QueueFull));
    assert_eq!(q.offer(ticket(8, Sheddable, "new", 8), &s), Offer::Refused(Refusal::QueueFull));
    assert_eq!(q.len(), 4);
}

#[test]
fn expiry_and_cancellation_remove_exactly_their_requests() {
    let s = settings(Fairness::RoundRobin, QueueOrder::FirstCome);
    let mut q = FlowQueue::default();
    for id in 1..=3 {
        let mut t = ticket(id, Criticality::Standard, "a", id);
        t.expires_ms = 100 * id;
        q.offer(t, &s);
    }
    assert_eq!(q.next_expiry_ms(), Some(100));
    assert_eq!(q.remove(2).map(|t| t.id), Some(2));
    assert_eq!(q.remove(2), None);
    let expired: Vec<u64> = q.expire(300).iter().map(|t| t.id).collect();
    assert_eq!(expired, vec![1, 3]);
    assert!(q.is_empty());
    assert_eq!(q.next_expiry_ms(), None);
}

#[test]
fn the_state_survives_a_round_trip_through_shared_data() {
    let s = settings(Fairness::AttainedService, QueueOrder::EarliestDeadline);
    let mut q = FlowQueue::default();
    q.offer(ticket(1, Criticality::Critical, "a", 1), &s);
    q.offer(ticket(2, Criticality::Standard, "b", 2), &s);
    q.take(1);
    assert_eq!(FlowQueue::decode(Some(&q.encode())), q);
    assert!(FlowQueue::decode(Some(b"not msgpack")).is_empty(), "garbage reads as an empty queue");
}

#[test]
fn refusals_answer_429_for_sheddable_and_503_otherwise() {
    let shed = Refusal::Expired.answer(Criticality::Sheddable, "p", 2);
    assert_eq!((shed.status, shed.code, shed.retry_after_s), (429, "expired", Some(2)));
    let std = Refusal::QueueFull.answer(Criticality::Standard, "p", 1);
    assert_eq!((std.status, std.code), (503, "queue_full"));
    assert!(std.message.contains("`p`"), "{}", std.message);
}

#[test]
fn tenant_names_are_cut_at_a_character_boundary() {
    let long = "é".repeat(100);
    let name = Ticket::tenant_name(Some(&long));
    assert!(name.len() <= ticket::MAX_TENANT_BYTES && name.chars().all(|c| c == 'é'));
    assert_eq!(Ticket::tenant_name(None), "");
}

#[test]
fn a_silent_holders_tickets_are_dropped_and_a_live_ones_kept() {
    let s = settings(Fairness::RoundRobin, QueueOrder::FirstCome);
    let mut q = FlowQueue::default();
    let (live, silent, unknown) = (1u64 << 32, 2u64 << 32, 3u64 << 32);
    q.offer(ticket(live | 1, Criticality::Standard, "a", 0), &s);
    q.offer(ticket(silent | 1, Criticality::Standard, "a", 0), &s);
    q.offer(ticket(unknown | 1, Criticality::Standard, "a", 0), &s);
    q.offer(ticket(unknown | 2, Criticality::Standard, "a", 1_900), &s);
    q.beat(1, 1_500);
    q.beat(2, 500);
    let dropped: Vec<u64> = q.drop_orphans(2_000, 1_000).iter().map(|t| t.id).collect();
    assert_eq!(dropped, vec![silent | 1, unknown | 1], "never heard from: judged by the ticket's age");
    assert_eq!(q.len(), 2);
    assert_eq!((q.beat_of(1), q.beat_of(2)), (Some(1_500), None), "a silent holder is forgotten");
    assert_eq!(holder_of(live | 7), 1);
}

#[test]
fn attained_service_of_tenants_gone_below_the_floor_is_forgotten() {
    let s = settings(Fairness::AttainedService, QueueOrder::FirstCome);
    let mut q = FlowQueue::default();
    for (id, tenant) in [(1, "a"), (2, "b"), (3, "c"), (4, "c")] {
        q.offer(ticket(id, Criticality::Standard, tenant, id), &s);
    }
    for id in 1..=4 {
        q.take(id);
    }
    assert!(q.is_empty());
    let bytes = q.encode().len();
    for id in 10..200 {
        q.offer(ticket(id, Criticality::Standard, &format!("t{id}"), id), &s);
        q.take(id);
    }
    assert!(q.encode().len() <= bytes + 64, "one-off tenants do not pile up: {} bytes", q.encode().len());
}

#[test]
fn rotating_tenant_ids_share_one_bucket_past_the_bound_and_state_stays_bounded() {
    let s = FlowControlSettings {
        max_queued: 4096,
        max_tenants: 8,
        ..settings(Fairness::AttainedService, QueueOrder::FirstCome)
    };
    let mut q = FlowQueue::default();
    // An honest tenant holds requests; an attacker sends each request as a new tenant.
    for id in 0..4 {
        q.offer(ticket(id, Criticality::Standard, "honest", id), &s);
    }
    for id in 4..1_004 {
        q.offer(ticket(id, Criticality::Standard, &format!("rotating-{id}"), id), &s);
    }
    let mut tenants: Vec<&str> = q.tickets().iter().map(|t| t.tenant.as_str()).collect();
    tenants.sort_unstable();
    tenants.dedup();
    // The honest tenant, 7 rotating ids, and the anonymous bucket for the rest.
    assert_eq!(tenants.len(), 9, "{tenants:?}");
    assert!(tenants.contains(&"honest") && tenants.contains(&""));
    // Attained-service order: the honest tenant is not pushed back behind 1,000 "new"
    // tenants; it gets its turn among 9.
    let mut served_honest = 0;
    for _ in 0..18 {
        let Some(next) = q.next(&s).map(|t| (t.id, t.tenant.clone())) else { break };
        q.take(next.0);
        served_honest += usize::from(next.1 == "honest");
    }
    assert!(served_honest >= 2, "the honest tenant got {served_honest} of 18 releases");
}

#[test]
fn tenants_with_nothing_held_are_forgotten_to_make_room() {
    let s = FlowControlSettings { max_tenants: 2, ..settings(Fairness::AttainedService, QueueOrder::FirstCome) };
    let mut q = FlowQueue::default();
    q.offer(ticket(1, Criticality::Standard, "a", 1), &s);
    q.offer(ticket(2, Criticality::Standard, "b", 2), &s);
    q.take(1);
    // "a" has nothing held: "c" takes its place rather than the anonymous bucket.
    q.offer(ticket(3, Criticality::Standard, "c", 3), &s);
    assert!(q.tickets().iter().any(|t| t.tenant == "c"));
    // Both places held: "d" joins the anonymous tenant.
    q.offer(ticket(4, Criticality::Standard, "d", 4), &s);
    assert!(q.tickets().iter().any(|t| t.id == 4 && t.tenant.is_empty()));
}
