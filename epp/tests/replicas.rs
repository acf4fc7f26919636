//! Two pickers exchanging through what the agent relays: one's decision reaches the
//! other in its next snapshot, so a conversation's next turn finds its pod there; and
//! one's in-flight requests count at the other through the load exchange.

use infergate_core::config::InfergateConfig;
use infergate_core::endpoint::Endpoint;
use infergate_core::replicas::{PeerLoad, ReplicaDigest, ReplicaLoad};
use infergate_core::request::parse_request;
use infergate_core::snapshot::{PodSignals, PodState, PoolState, SNAPSHOT_VERSION, Snapshot};
use infergate_epp::picker::{Picker, PickerSettings, now_ms};

const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";
const POOL: &str = "llama";

fn config() -> InfergateConfig {
    let text = include_str!("../../examples/infergate.yaml");
    InfergateConfig::from_yaml_str(text, "examples/infergate.yaml").unwrap()
}

fn picker(seed: u64) -> Picker {
    let settings = PickerSettings { max_body_bytes: 1 << 20, early_decision: false, explain: true };
    Picker::new(config().routing_config(), settings, seed)
}

fn pods() -> Vec<Endpoint> {
    config().pools.iter().find(|p| p.name == POOL).unwrap().endpoints.clone()
}

/// Every pod of the pool idle on fresh metrics, with `peers` as the agent relays them.
fn snapshot(sequence: u64, peers: ReplicaDigest) -> Vec<u8> {
    let config = config();
    let now = now_ms();
    let idle = PodSignals {
        waiting: Some(0.0),
        running: Some(0.0),
        kv_cache_usage: Some(0.0),
        max_loras: Some(4),
        ..PodSignals::default()
    };
    let pods = pods().into_iter().map(|pod| PodState::scraped(pod, now, idle.clone())).collect();
    let snapshot = Snapshot {
        version: SNAPSHOT_VERSION,
        sequence,
        created_at_ms: now,
        routing: config.routing_config(),
        pools: vec![PoolState { name: POOL.into(), pods }],
        peers,
    };
    snapshot.encode().unwrap()
}

fn replicated(replicas: u32, index: u32, records: ReplicaDigest) -> ReplicaDigest {
    ReplicaDigest { replicas, index: Some(index), ..records }
}

fn turn(conversation: &str, turns: usize) -> Vec<u8> {
    let mut messages = vec![serde_json::json!({"role": "system", "content": conversation.repeat(800)})];
    for n in 0..turns {
        messages.push(serde_json::json!({"role": "user", "content": format!("question {n} {}", "why ".repeat(50))}));
        messages.push(serde_json::json!({"role": "assistant", "content": format!("answer {n}")}));
    }
    messages.push(serde_json::json!({"role": "user", "content": "and then?"}));
    serde_json::to_vec(&serde_json::json!({"model": MODEL, "messages": messages})).unwrap()
}

fn first_pod(picker: &Picker, body: &[u8]) -> Endpoint {
    let request = parse_request(body, &picker.prefix_settings()).unwrap();
    let routed = picker.route(&request, None).unwrap();
    let pod = routed.endpoints.split(',').next().unwrap().parse().unwrap();
    picker.finish(routed);
    pod
}

#[test]
fn a_conversation_keeps_its_pod_when_its_next_turn_reaches_the_other_picker() {
    let (a, b) = (picker(1), picker(2));
    // The agent's first pushes, with two pickers: nothing to relay yet.
    let (_, digest) = a.push_snapshot(&snapshot(1, replicated(2, 0, ReplicaDigest::default())), true).unwrap();
    assert!(digest.unwrap().records.is_empty());
    b.push_snapshot(&snapshot(1, replicated(2, 1, ReplicaDigest::default())), true).unwrap();

    // Each picker starts conversations of its own; their first turns land somewhere.
    let conversations = ["alpha ", "bravo ", "charlie ", "delta ", "echo ", "foxtrot "];
    let first: Vec<Endpoint> = conversations.iter().map(|c| first_pod(&a, &turn(c, 1))).collect();

    // A's answer to its next push is its digest; the agent puts it in B's next snapshot.
    let (_, digest) = a.push_snapshot(&snapshot(2, replicated(2, 0, ReplicaDigest::default())), true).unwrap();
    let digest = digest.unwrap();
    assert_eq!(digest.records.len(), conversations.len(), "one record per decision");
    assert!(digest.load.is_empty(), "every request finished");
    let relayed = ReplicaDigest { records: digest.records, ..ReplicaDigest::default() };
    let (_, own) = b.push_snapshot(&snapshot(2, replicated(2, 1, relayed)), true).unwrap();
    assert!(own.unwrap().records.is_empty(), "B passes on only its own decisions");

    // Every conversation's next turn, at B, goes where its first turn went at A.
    let next: Vec<Endpoint> = conversations.iter().map(|c| first_pod(&b, &turn(c, 2))).collect();
    assert_eq!(next, first);
}

#[test]
fn without_a_replicated_push_a_picker_keeps_no_records_and_answers_nothing() {
    let a = picker(1);
    let (_, digest) = a.push_snapshot(&snapshot(1, ReplicaDigest::default()), false).unwrap();
    assert!(digest.is_none());
    first_pod(&a, &turn("alpha ", 1));
    let (_, digest) = a.push_snapshot(&snapshot(2, ReplicaDigest::default()), true).unwrap();
    assert!(digest.unwrap().records.is_empty(), "records made while alone are not kept for peers");
}

#[test]
fn the_other_pickers_load_counts_and_the_answer_is_this_ones() {
    let a = picker(1);
    a.push_snapshot(&snapshot(1, replicated(2, 0, ReplicaDigest::default())), true).unwrap();
    let pods = pods();
    // The other picker holds 40 requests on every pod but the last.
    let busy = pods.iter().take(pods.len() - 1).map(|&pod| PeerLoad { pod, in_flight: 40, pending_prefill_tokens: 0 });
    let own = a.exchange_load(&ReplicaLoad { load: busy.collect() }.encode()).unwrap();
    assert!(own.load.is_empty(), "this picker has nothing in flight");
    let request = parse_request(&turn("golf ", 0), &a.prefix_settings()).unwrap();
    let routed = a.route(&request, None).unwrap();
    let chosen: Endpoint = routed.endpoints.split(',').next().unwrap().parse().unwrap();
    assert_eq!(chosen, *pods.last().unwrap(), "the only pod the other picker leaves idle");
    let own = a.exchange_load(&ReplicaLoad::default().encode()).unwrap();
    assert_eq!(own.load.iter().map(|l| (l.pod, l.in_flight)).collect::<Vec<_>>(), vec![(chosen, 1)]);
    assert!(a.exchange_load(b"\xc1 garbage").is_err());
}
