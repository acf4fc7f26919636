//! The gateway queue in the filter: held requests resume with their routing, expire,
//! leave when their client does, and two workers share one order and one bound.

use infergate_core::config::{Criticality, RoutingConfig};
use infergate_core::snapshot::PodSignals;
use infergate_core::wire::header;

use crate::host::events::Flow;
use crate::host::fake::Stream;
use crate::test_support::{Gateway, PODS, chat, idle, routing, snapshot_with};

fn flow_routing(max_queued: u32) -> RoutingConfig {
    let mut routing = routing();
    routing.flow_control.enabled = true;
    routing.flow_control.max_queued = max_queued;
    // Clients may lower their requests' band from critical.
    routing.models[0].criticality = Criticality::Critical;
    routing
}

fn saturated() -> PodSignals {
    PodSignals { waiting: Some(9.0), running: Some(8.0), kv_cache_usage: Some(0.95), ..idle() }
}

/// A gateway of `workers` routers whose pool is saturated, flow control on.
fn saturated_gateway(workers: usize, max_queued: u32) -> Gateway {
    let gateway = Gateway::new(workers, false);
    let now = gateway.envoy.now_ms();
    let bytes = snapshot_with(1, now, &[saturated(), saturated(), saturated()], flow_routing(max_queued));
    assert_eq!(gateway.push_snapshot(&bytes), 204);
    gateway
}

fn room(gateway: &Gateway, sequence: u64) {
    let now = gateway.envoy.now_ms();
    let bytes = snapshot_with(sequence, now, &[idle(), idle(), idle()], flow_routing(64));
    assert_eq!(gateway.push_snapshot(&bytes), 204);
}

fn send(gateway: &Gateway, worker: usize, headers: &[(&str, &str)]) -> (Stream, Flow) {
    let mut stream = gateway.routers[worker].stream();
    let flow = stream.post_json("/v1/chat/completions", headers, &chat("hello there"));
    (stream, flow)
}

fn held(stream: &mut Stream, flow: Flow) -> bool {
    stream.poll();
    flow == Flow::Pause && stream.reply().is_none() && stream.request_header(header::ENDPOINT).is_none()
}

#[test]
fn a_held_request_resumes_with_its_routing_once_a_pod_has_room_and_completes() {
    let gateway = saturated_gateway(1, 64);
    let (mut stream, flow) = send(&gateway, 0, &[]);
    assert!(held(&mut stream, flow), "held while every pod is saturated");
    assert_eq!(gateway.envoy.stat("infergate.flow.queued"), 1);
    gateway.envoy.advance_ms(5);
    assert!(!stream.resumed(), "still saturated: still held");
    room(&gateway, 2);
    gateway.envoy.advance_ms(5);
    assert!(stream.resumed(), "released on the tick after room appeared");
    let chosen = stream.request_header(header::ENDPOINT).map(crate::test_support::first_endpoint);
    assert!(chosen.as_deref().is_some_and(|c| PODS.contains(&c)), "routed to {chosen:?}");
    assert_eq!(stream.request_header(header::POOL), Some("llama"));
    assert_eq!(gateway.envoy.stat("infergate.flow.queued"), 0);
    assert_eq!(gateway.envoy.stat("infergate.flow.released"), 1);
    assert_eq!(gateway.envoy.samples("infergate.flow.wait_ms"), vec![10]);
    // The released stream's answer is handled as a routed one's: counted, then freed.
    let pod = chosen.unwrap_or_default();
    stream.respond(&pod, 200, "text/event-stream", &[b"data: {}\n\n"]);
    stream.end();
    assert_eq!(gateway.envoy.stat("infergate.decisions.signals"), 1);
}

#[test]
fn a_request_held_past_its_bands_longest_wait_gets_503_or_429_with_its_reason() {
    let gateway = saturated_gateway(1, 64);
    let (mut standard, flow) = send(&gateway, 0, &[(header::CRITICALITY, "standard")]);
    assert!(held(&mut standard, flow));
    let (mut sheddable, flow) = send(&gateway, 0, &[(header::CRITICALITY, "sheddable")]);
    assert!(held(&mut sheddable, flow), "sheddable requests are held too, not shed");
    // The pool stays saturated: a fresh snapshot every 500 ms says so (signals older
    // than a second are not trusted, and a pool the gateway cannot see is not held).
    let mut sequence = 1;
    let mut hold_for = |ms: u64| {
        for _ in 0..ms / 500 {
            sequence += 1;
            let now = gateway.envoy.now_ms();
            let bytes = snapshot_with(sequence, now, &[saturated(), saturated(), saturated()], flow_routing(64));
            assert_eq!(gateway.push_snapshot(&bytes), 204);
            gateway.envoy.advance_ms(500);
        }
    };
    // Sheddable's longest wait is 10 s by default, standard's 30 s.
    hold_for(10_000);
    sheddable.poll();
    let reply = sheddable.reply().cloned().expect("answered at expiry");
    assert_eq!((reply.status, reply.header("retry-after")), (429, Some("1")));
    assert_eq!(reply.header(header::QUEUE_REASON), Some("expired"));
    assert_eq!(reply.json()["error"]["code"], "expired");
    standard.poll();
    assert!(standard.reply().is_none());
    hold_for(20_000);
    standard.poll();
    let reply = standard.reply().cloned().expect("answered at expiry");
    assert_eq!(reply.status, 503);
    assert!(!standard.resumed() && !sheddable.resumed());
    assert_eq!(gateway.envoy.stat("infergate.flow.dropped.expired"), 2);
    assert_eq!(gateway.envoy.stat("infergate.flow.queued"), 0);
}

#[test]
fn a_client_that_leaves_while_held_frees_its_place_at_once() {
    let gateway = saturated_gateway(1, 1);
    let (mut first, flow) = send(&gateway, 0, &[]);
    assert!(held(&mut first, flow));
    let (second, _) = send(&gateway, 0, &[]);
    assert_eq!(second.reply().map(|r| r.status), Some(503), "one place, taken");
    assert_eq!(second.reply().and_then(|r| r.header(header::QUEUE_REASON)), Some("queue_full"));
    first.end();
    assert_eq!(gateway.envoy.stat("infergate.flow.dropped.cancelled"), 1);
    let (mut third, flow) = send(&gateway, 0, &[]);
    assert!(held(&mut third, flow), "the place is free again");
}

#[test]
fn two_workers_share_one_bound_and_one_order() {
    let gateway = saturated_gateway(2, 2);
    let (mut standard, flow) = send(&gateway, 1, &[(header::CRITICALITY, "standard")]);
    assert!(held(&mut standard, flow));
    let (mut critical, flow) = send(&gateway, 0, &[]);
    assert!(held(&mut critical, flow), "behind a held request, a new one queues too");
    let (third, _) = send(&gateway, 1, &[(header::CRITICALITY, "standard")]);
    assert_eq!(third.reply().map(|r| r.status), Some(503), "the bound is the Envoy's, not the worker's");
    // Two waiting on one pod: room for a critical request (limit 4), none for a
    // standard one (limit 1). Worker 0's critical one goes, though it came last.
    let now = gateway.envoy.now_ms();
    let two_waiting = PodSignals { waiting: Some(2.0), running: Some(1.0), kv_cache_usage: Some(0.1), ..idle() };
    let bytes = snapshot_with(2, now, &[two_waiting, saturated(), saturated()], flow_routing(2));
    assert_eq!(gateway.push_snapshot(&bytes), 204);
    gateway.envoy.advance_ms(5);
    assert!(critical.resumed());
    assert!(!standard.resumed(), "no pod has room for a standard request");
    room(&gateway, 3);
    gateway.envoy.advance_ms(5);
    assert!(standard.resumed());
}

#[test]
fn a_tight_ttft_target_passes_the_tenants_older_request_and_a_bad_one_is_refused() {
    let gateway = saturated_gateway(1, 64);
    let tenant = ("x-tenant-id", "acme");
    let standard = (header::CRITICALITY, "standard");
    let (mut relaxed, flow) = send(&gateway, 0, &[tenant, standard]);
    assert!(held(&mut relaxed, flow));
    let (mut urgent, flow) = send(&gateway, 0, &[tenant, standard, (header::TTFT_TARGET_MS, "200")]);
    assert!(held(&mut urgent, flow));
    let now = gateway.envoy.now_ms();
    let one_slot = PodSignals { waiting: Some(0.0), running: Some(1.0), kv_cache_usage: Some(0.1), ..idle() };
    let bytes = snapshot_with(2, now, &[one_slot, saturated(), saturated()], flow_routing(64));
    assert_eq!(gateway.push_snapshot(&bytes), 204);
    gateway.envoy.advance_ms(5);
    assert!(urgent.resumed() && !relaxed.resumed(), "earliest deadline first within a tenant");
    let (bad, _) = send(&gateway, 0, &[(header::TTFT_TARGET_MS, "soon")]);
    let reply = bad.reply().cloned().expect("refused");
    assert_eq!((reply.status, reply.json()["error"]["code"].as_str()), (400, Some("invalid_ttft_target")));
}

#[test]
fn with_flow_control_off_nothing_is_held() {
    let gateway = Gateway::new(1, false);
    let now = gateway.envoy.now_ms();
    let bytes = snapshot_with(1, now, &[saturated(), saturated(), saturated()], routing());
    assert_eq!(gateway.push_snapshot(&bytes), 204);
    let (stream, flow) = send(&gateway, 0, &[]);
    assert_eq!(flow, Flow::Continue, "routed to queue at the pod");
    assert!(stream.request_header(header::ENDPOINT).is_some());
    assert_eq!(gateway.envoy.stat("infergate.flow.queued"), 0);
}

#[test]
fn with_the_agent_gone_held_requests_go_to_the_pods_rather_than_wait_for_expiry() {
    let gateway = saturated_gateway(1, 64);
    let (mut stream, flow) = send(&gateway, 0, &[(header::CRITICALITY, "standard")]);
    assert!(held(&mut stream, flow));
    // No snapshot for longer than signal_max_age_ms (1 s): the gateway cannot see the
    // pods, and routes on its own in-flight counts instead of holding blindly.
    gateway.envoy.advance_ms(500);
    assert!(!stream.resumed());
    gateway.envoy.advance_ms(600);
    assert!(stream.resumed());
    assert!(stream.request_header(header::ENDPOINT).is_some());
}

#[test]
fn a_silent_workers_tickets_are_removed_so_the_queue_moves_on() {
    let gateway = saturated_gateway(2, 64);
    let standard = [(header::CRITICALITY, "standard")];
    let (mut orphan, flow) = send(&gateway, 1, &standard);
    assert!(held(&mut orphan, flow));
    // Torn down while shared data refuses writes: its ticket stays behind.
    gateway.envoy.fail("set_shared_data");
    gateway.routers[1].tear_down();
    gateway.envoy.heal("set_shared_data");
    let (mut waiting, flow) = send(&gateway, 0, &standard);
    assert!(held(&mut waiting, flow), "queued behind the torn-down worker's request");
    room(&gateway, 2);
    gateway.envoy.advance_ms(5);
    assert!(!waiting.resumed(), "the head is another worker's: it waits for that worker");
    for sequence in 3..7 {
        gateway.envoy.advance_ms(300);
        room(&gateway, sequence);
    }
    gateway.envoy.advance_ms(5);
    assert!(waiting.resumed(), "the silent worker's ticket was removed after a second");
}

#[test]
fn a_worker_torn_down_while_holding_answers_its_requests_and_leaves_the_queue() {
    let gateway = saturated_gateway(1, 64);
    let (mut stream, flow) = send(&gateway, 0, &[]);
    assert!(held(&mut stream, flow));
    gateway.routers[0].tear_down();
    stream.poll();
    let reply = stream.reply().cloned().expect("answered at teardown");
    assert_eq!((reply.status, reply.header("retry-after")), (503, Some("1")));
    assert_eq!(gateway.envoy.stat("infergate.flow.queued"), 0);
    let key = format!("{}llama", infergate_core::wire::shared_data::FLOW_PREFIX);
    let queue = infergate_core::flow::FlowQueue::decode(gateway.envoy.shared_value(&key).as_deref());
    assert!(queue.is_empty());
}
