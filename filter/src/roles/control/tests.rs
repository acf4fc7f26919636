use infergate_core::replicas::{PeerLoad, ReplicaDigest};
use infergate_core::wire::{header, path, queue, shared_data};

use crate::host::fake::{FakeEnvoy, Reply, take_logs};
use crate::roles::router::peers::FLUSH_PERIOD_MS;
use crate::shared::generation;
use crate::test_support::{Gateway, TOKEN, TOKEN_ENV, VM_ID, control_config, idle, pod, push, snapshot, summary};

fn generation_of(gateway: &Gateway) -> u64 {
    gateway.envoy.shared_value(shared_data::GENERATION).map_or(0, |b| generation::decode(&b))
}

fn error_of(stream: &crate::host::fake::Stream) -> (u32, String) {
    let reply = stream.reply().cloned();
    reply.map_or((0, String::new()), |r| (r.status, r.json()["error"].as_str().unwrap_or_default().to_string()))
}

#[test]
fn an_admitted_snapshot_is_published_by_the_singleton() {
    let gateway = Gateway::new(0, false);
    let bytes = snapshot(1, gateway.envoy.now_ms(), &[idle(), idle(), idle()]);
    assert_eq!(gateway.push_snapshot(&bytes), 204);
    assert_eq!(gateway.envoy.shared_value(shared_data::SNAPSHOT), Some(bytes));
    assert_eq!(generation_of(&gateway), 1);
    assert_eq!(gateway.envoy.stat("infergate.control.accepted"), 1);
}

#[test]
fn a_push_without_the_token_is_refused() {
    let gateway = Gateway::new(0, false);
    let mut stream = gateway.control.stream();
    let body = snapshot(1, 0, &[idle()]);
    stream.request("POST", path::SNAPSHOT, &[("authorization", "Bearer wrong")], &[&body]);
    assert_eq!(error_of(&stream), (401, "missing or wrong bearer token".to_string()));
    assert_eq!(gateway.envoy.stat("infergate.control.unauthorized"), 1);
    assert_eq!(generation_of(&gateway), 0);
}

#[test]
fn a_garbage_snapshot_is_refused_and_the_active_one_stays() {
    let gateway = Gateway::new(0, false);
    let good = snapshot(1, gateway.envoy.now_ms(), &[idle(), idle(), idle()]);
    assert_eq!(gateway.push_snapshot(&good), 204);
    let stream = push(&gateway.control, path::SNAPSHOT, b"\x93garbage");
    gateway.envoy.deliver();
    let (status, message) = error_of(&stream);
    assert_eq!(status, 400);
    assert!(message.contains("not valid MessagePack"), "{message}");
    assert_eq!(gateway.envoy.shared_value(shared_data::SNAPSHOT), Some(good));
    assert_eq!(gateway.envoy.stat("infergate.control.invalid"), 1);
}

#[test]
fn a_replayed_sequence_is_refused() {
    let gateway = Gateway::new(0, false);
    let now = gateway.envoy.now_ms();
    assert_eq!(gateway.push_snapshot(&snapshot(5, now, &[idle()])), 204);
    let stream = push(&gateway.control, path::SNAPSHOT, &snapshot(5, now, &[idle()]));
    assert_eq!(error_of(&stream), (409, "sequence 5 is not newer than 5, the newest admitted".to_string()));
    assert_eq!(gateway.push_snapshot(&snapshot(6, now, &[idle()])), 204);
}

#[test]
fn wrong_paths_methods_and_sizes_get_precise_answers() {
    let gateway = Gateway::new(0, false);
    let mut unknown = gateway.control.stream();
    unknown.request("POST", "/v1/other", &[], &[b"x"]);
    assert_eq!(error_of(&unknown).0, 404);
    let mut get = gateway.control.stream();
    get.request("GET", path::SNAPSHOT, &[], &[]);
    assert_eq!(error_of(&get).0, 405);
    let mut huge = gateway.control.stream();
    huge.request("POST", path::SNAPSHOT, &[("authorization", "Bearer s3cret"), ("content-length", "99999999")], &[]);
    assert_eq!(error_of(&huge), (413, "snapshot too large".to_string()));
}

#[test]
fn without_a_singleton_a_push_is_answered_503() {
    let envoy = FakeEnvoy::new();
    envoy.set_env(TOKEN_ENV, crate::test_support::TOKEN);
    let control = envoy.start(VM_ID, &control_config());
    let stream = push(&control, path::SNAPSHOT, &snapshot(1, 0, &[idle()]));
    let (status, message) = error_of(&stream);
    assert_eq!(status, 503);
    assert!(message.contains("is the singleton configured"), "{message}");
}

#[test]
fn a_queue_that_refuses_is_answered_503_and_resolved_again() {
    let gateway = Gateway::new(0, false);
    gateway.envoy.fail("enqueue");
    let stream = push(&gateway.control, path::SNAPSHOT, &snapshot(1, 0, &[idle()]));
    assert_eq!(error_of(&stream), (503, "cannot queue the snapshot: InternalFailure".to_string()));
    gateway.envoy.heal("enqueue");
    assert_eq!(gateway.push_snapshot(&snapshot(2, 0, &[idle()])), 204);
}

#[test]
fn a_control_role_without_its_token_does_not_start() {
    let envoy = FakeEnvoy::new();
    take_logs();
    let control = envoy.start(VM_ID, &control_config());
    assert!(!control.configured());
    assert!(take_logs().iter().any(|l| l.contains(&format!("the environment variable {TOKEN_ENV} is empty"))));
}

#[test]
fn summaries_are_stored_per_cluster_and_replays_refused() {
    let gateway = Gateway::new(0, false);
    let now = gateway.envoy.now_ms();
    assert_eq!(
        push(&gateway.control, path::SUMMARY, &summary("east", 3, now, 40.0)).reply().map(|r| r.status),
        Some(204)
    );
    assert!(gateway.envoy.shared_value("infergate.summary.east").is_some());
    assert_eq!(gateway.envoy.shared_value(shared_data::SUMMARY_GENERATION).map(|b| generation::decode(&b)), Some(1));
    let replay = push(&gateway.control, path::SUMMARY, &summary("east", 3, now, 40.0));
    assert_eq!(error_of(&replay), (409, "sequence 3 of cluster east is not newer than 3".to_string()));
    let garbage = push(&gateway.control, path::SUMMARY, b"nope");
    assert_eq!(error_of(&garbage).0, 400);
}

/// A snapshot push from an agent that serves `replicas` gateways; the reply.
fn push_to_replicas(gateway: &Gateway, replicas: &str, sequence: u64) -> Reply {
    push_body_to_replicas(gateway, replicas, &snapshot(sequence, gateway.envoy.now_ms(), &[idle(), idle(), idle()]))
}

fn push_body_to_replicas(gateway: &Gateway, replicas: &str, body: &[u8]) -> Reply {
    let mut stream = gateway.control.stream();
    let bearer = format!("Bearer {TOKEN}");
    stream.request("POST", path::SNAPSHOT, &[("authorization", &bearer), (header::REPLICAS, replicas)], &[body]);
    gateway.envoy.deliver();
    stream.reply().cloned().unwrap_or_else(|| panic!("no reply to a push"))
}

fn digest_of(reply: &Reply) -> ReplicaDigest {
    assert_eq!((reply.status, reply.header("content-type")), (200, Some("application/msgpack")));
    ReplicaDigest::decode(&reply.body).unwrap_or_else(|e| panic!("{e}"))
}

fn outbox_length(gateway: &Gateway) -> usize {
    gateway.envoy.queued(queue::OUTBOX).values().sum()
}

#[test]
fn with_several_replicas_a_push_is_answered_with_this_replicas_records_and_load() {
    let gateway = Gateway::new(2, false);
    assert_eq!(digest_of(&push_to_replicas(&gateway, "3", 1)), ReplicaDigest::default());
    gateway.route(1, "join").0.end();
    let (mut stream, chosen) = gateway.route(0, &"a replicated conversation ".repeat(160));
    let chosen = chosen.unwrap_or_default();
    // A streamed answer's first token: the prefill is done, the request still runs.
    stream.respond(&chosen, 200, "text/event-stream", &[b"data: {}\n\n"]);
    assert_eq!(outbox_length(&gateway), 1, "the first token's record went to the outbox too");

    let digest = digest_of(&push_to_replicas(&gateway, "3", 2));
    assert_eq!(digest.records.iter().map(|r| r.pod).collect::<Vec<_>>(), [pod(&chosen)]);
    assert!(digest.records.iter().all(|r| r.hashes.len() > 10), "{:?}", digest.records);
    assert_eq!(digest.load, [PeerLoad { pod: pod(&chosen), in_flight: 1, pending_prefill_tokens: 0 }]);
    assert_eq!(outbox_length(&gateway), 0);

    stream.end();
    assert_eq!(digest_of(&push_to_replicas(&gateway, "3", 3)), ReplicaDigest::default(), "drained and idle");
}

#[test]
fn a_lone_replica_is_answered_204_and_collects_nothing() {
    let gateway = Gateway::new(2, false);
    let reply = push_to_replicas(&gateway, "1", 1);
    assert_eq!((reply.status, reply.body.len()), (204, 0));
    gateway.route(1, "join").0.end();
    let (mut stream, chosen) = gateway.route(0, &"a lone conversation ".repeat(200));
    stream.respond(&chosen.unwrap_or_default(), 200, "application/json", &[b"{}"]);
    assert!(gateway.envoy.queued(queue::OUTBOX).is_empty(), "the outbox was registered");
}

#[test]
fn without_pushes_the_routers_stop_filling_the_outbox() {
    let gateway = Gateway::new(2, false);
    push_to_replicas(&gateway, "2", 1);
    gateway.route(1, "join").0.end();
    // The agent died: no push for over a second.
    gateway.envoy.advance_ms(1_001);
    let (mut stream, chosen) = gateway.route(0, &"after the agent died ".repeat(200));
    stream.respond(&chosen.unwrap_or_default(), 200, "application/json", &[b"{}"]);
    assert_eq!(outbox_length(&gateway), 0);
    assert_eq!(gateway.envoy.stat("infergate.prefix.enqueued"), 1, "the other worker still gets it");
}

/// Regression: a worker joins the prefix peers at its first request, so the records
/// relayed before then reached no queue of its, and a conversation's next turn on a
/// replica that had served nothing missed the pod its first turn warmed elsewhere.
#[test]
fn records_relayed_before_a_workers_first_request_still_route_it() {
    let a = Gateway::new(2, false);
    push_to_replicas(&a, "2", 1);
    a.route(1, "join").0.end();
    let prompts: Vec<String> = (0..3).map(|i| format!("conversation {i} starts on replica A ").repeat(60)).collect();
    let mut pods = Vec::new();
    let mut records = Vec::new();
    for (sequence, prompt) in (2..).zip(&prompts) {
        // Past the batching period, so that each first turn's record leaves at once.
        a.envoy.advance_ms(FLUSH_PERIOD_MS);
        let (mut first, pod) = a.route(0, prompt);
        let pod = pod.unwrap_or_default();
        first.respond(&pod, 200, "application/json", &[b"{}"]);
        first.end();
        pods.push(pod);
        records.extend(digest_of(&push_to_replicas(&a, "2", sequence)).records);
    }
    assert_eq!(records.len(), 3, "{records:?}");

    // Replica B gets them before any of its workers has routed a request.
    let b = Gateway::new(2, false);
    push_to_replicas(&b, "2", 1);
    let mut with_records =
        infergate_core::snapshot::Snapshot::decode(&snapshot(2, b.envoy.now_ms(), &[idle(), idle(), idle()]))
            .unwrap_or_else(|e| panic!("{e}"));
    with_records.peers.records = records;
    assert_eq!(push_body_to_replicas(&b, "2", &with_records.encode().unwrap_or_default()).status, 200);
    for (i, (prompt, pod)) in prompts.iter().zip(&pods).enumerate() {
        let (mut next, chosen) = b.route(i % 2, &format!("{prompt} next turn"));
        assert_eq!(chosen.as_deref(), Some(pod.as_str()), "conversation {i} on worker {}", i % 2);
        next.end();
    }
}

#[test]
fn another_replicas_records_reach_every_worker_even_one_that_skips_snapshots() {
    // Replica A routes a conversation's first turn and reports its record.
    let a = Gateway::new(2, false);
    push_to_replicas(&a, "2", 1);
    a.route(1, "join").0.end();
    let prompt = "a conversation that moves between replicas ".repeat(100);
    let (mut first, pod_a) = a.route(0, &prompt);
    let pod_a = pod_a.unwrap_or_default();
    first.respond(&pod_a, 200, "application/json", &[b"{}"]);
    let records = digest_of(&push_to_replicas(&a, "2", 2)).records;
    assert_eq!(records.len(), 1);

    // Replica B gets it with a snapshot, then another snapshot without it, before its
    // workers route again: they read only the newest.
    let b = Gateway::new(2, false);
    push_to_replicas(&b, "2", 1);
    for worker in 0..2 {
        b.route(worker, "join").0.end();
    }
    let mut with_records =
        infergate_core::snapshot::Snapshot::decode(&snapshot(2, b.envoy.now_ms(), &[idle(), idle(), idle()]))
            .unwrap_or_else(|e| panic!("{e}"));
    with_records.peers.records = records;
    let stream = push(&b.control, path::SNAPSHOT, &with_records.encode().unwrap_or_default());
    assert_eq!(stream.reply().map(|r| r.status), Some(204), "a push without the replicas header");
    let mut stream = b.control.stream();
    let bearer = format!("Bearer {TOKEN}");
    stream.request(
        "POST",
        path::SNAPSHOT,
        &[("authorization", &bearer), (header::REPLICAS, "2")],
        &[&with_records.encode().unwrap_or_default()],
    );
    assert_eq!(stream.reply().map(|r| r.status), Some(409), "a replay is refused before its records are used");
    with_records.sequence = 3;
    let mut stream = b.control.stream();
    stream.request(
        "POST",
        path::SNAPSHOT,
        &[("authorization", &bearer), (header::REPLICAS, "2")],
        &[&with_records.encode().unwrap_or_default()],
    );
    assert_eq!(stream.reply().map(|r| r.status), Some(200));
    push_to_replicas(&b, "2", 4);
    for worker in 0..2 {
        let (_, chosen) = b.route(worker, &format!("{prompt} next turn"));
        assert_eq!(chosen.as_deref(), Some(pod_a.as_str()), "worker {worker}");
    }
}

#[test]
fn the_digest_passes_on_prefix_records_without_adapter_loads() {
    // An adapter load rides in a record between the workers of one Envoy; the digest
    // drops it: its time is this host's clock, which another replica would misread.
    let gateway = Gateway::new(2, false);
    let lora =
        infergate_core::snapshot::PodSignals { running_adapters: vec!["other".into()], max_loras: Some(2), ..idle() };
    let signals = [lora.clone(), lora.clone(), lora];
    let body = crate::test_support::snapshot_with(1, gateway.envoy.now_ms(), &signals, crate::test_support::routing());
    assert_eq!(push_body_to_replicas(&gateway, "3", &body).status, 200);
    gateway.route(1, "join").0.end();
    let (mut lora_request, chosen) = gateway.route_model(0, "sql-lora", &"a query ".repeat(300));
    let chosen = pod(&chosen.unwrap_or_default());
    gateway.envoy.advance_ms(5);
    assert!(outbox_length(&gateway) >= 1, "the claim went to the outbox");

    let digest = digest_of(&push_to_replicas(&gateway, "3", 2));
    let claim = digest.records.iter().find(|r| r.pod == chosen && r.hashes.len() > 10);
    assert!(claim.is_some_and(|r| r.adapter_load.is_none()), "{:?}", digest.records);
    assert!(digest.records.iter().all(|r| r.adapter_load.is_none() && !r.hashes.is_empty()));
    lora_request.end();
}

fn push_load(gateway: &Gateway, body: &[u8]) -> Reply {
    let stream = push(&gateway.control, path::LOAD, body);
    gateway.envoy.deliver();
    stream.reply().cloned().unwrap_or_else(|| panic!("no reply to a load push"))
}

#[test]
fn a_load_push_reaches_every_router_worker_and_is_answered_with_this_replicas_load() {
    use infergate_core::replicas::ReplicaLoad;
    let gateway = Gateway::new(2, false);
    let body = snapshot(1, gateway.envoy.now_ms(), &[idle(), idle(), idle()]);
    let pods: Vec<_> = infergate_core::snapshot::Snapshot::decode(&body)
        .unwrap_or_else(|e| panic!("{e}"))
        .pools
        .iter()
        .flat_map(|p| p.pods.iter().map(|pod| pod.address))
        .collect();
    assert_eq!(push_body_to_replicas(&gateway, "2", &body).status, 200);
    gateway.route(1, "join").0.end();
    let (mut held, chosen) = gateway.route(0, "the first request, still running");
    let chosen = pod(&chosen.unwrap_or_default());

    // The other replica has five requests on every other pod.
    let others = pods.iter().filter(|&&p| p != chosen);
    let load = others.map(|&pod| PeerLoad { pod, in_flight: 5, pending_prefill_tokens: 0 }).collect();
    let reply = push_load(&gateway, &ReplicaLoad { load }.encode());
    assert_eq!((reply.status, reply.header("content-type")), (200, Some("application/msgpack")));
    let own = ReplicaLoad::decode(&reply.body).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(own.load.iter().map(|l| (l.pod, l.in_flight)).collect::<Vec<_>>(), [(chosen, 1)]);
    assert_eq!(gateway.envoy.stat("infergate.control.load_pushes"), 1);

    // Alone, each worker would start the next request on an idle pod; with the others'
    // load both find the pod with one request the least busy.
    for worker in [1, 0] {
        let (mut next, served) = gateway.route(worker, &format!("the next request on worker {worker}"));
        assert_eq!(served.map(|p| pod(&p)), Some(chosen), "worker {worker}");
        next.end();
    }
    held.end();
}

#[test]
fn a_garbage_load_push_is_refused_and_stores_nothing() {
    let gateway = Gateway::new(1, false);
    let reply = push_load(&gateway, b"\x93garbage");
    assert_eq!(reply.status, 400);
    let message = reply.json()["error"].as_str().unwrap_or_default().to_string();
    assert!(message.starts_with("replica load is not valid MessagePack"), "{message}");
    assert_eq!(gateway.envoy.shared_value(shared_data::PEER_LOAD), None);
    assert_eq!(gateway.envoy.stat("infergate.control.invalid"), 1);
    assert!(take_logs().iter().any(|l| l.contains("refused a load push")));
}
