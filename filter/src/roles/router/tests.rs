use infergate_core::snapshot::PodSignals;
use infergate_core::wire::{header, queue, shared_data};

use crate::host::events::Flow;
use crate::host::fake::{Stream, take_logs};
use crate::roles::router::peers::FLUSH_PERIOD_MS;
use crate::shared::pod_loads::PodLoads;
use crate::test_support::{Gateway, PODS, chat, idle, pod, snapshot};

/// A prompt long enough that its blocks decide (about 1,000 tokens).
fn long_prompt(seed: &str) -> String {
    format!("{seed} ").repeat(4_000 / (seed.len() + 1))
}

fn in_flight(gateway: &Gateway, address: &str) -> u64 {
    u64::from(PodLoads::read(&*gateway.routers[0].host).get(pod(address)).in_flight)
}

#[test]
fn a_request_is_routed_with_the_routing_headers_and_counted() {
    let gateway = Gateway::new(1, true);
    assert_eq!(gateway.push_snapshot(&snapshot(1, gateway.envoy.now_ms(), &[idle(), idle(), idle()])), 204);
    let (mut stream, chosen) = gateway.route(0, "hello");
    assert!(chosen.as_deref().is_some_and(|c| PODS.contains(&c)), "chose {chosen:?}");
    assert_eq!(stream.request_header(header::POOL), Some("llama"));
    assert_eq!(stream.request_header(header::MODEL), Some(crate::test_support::MODEL));
    assert!(stream.reply().is_none());
    assert_eq!(gateway.envoy.stat("infergate.decisions.signals"), 1);
    assert_eq!(gateway.envoy.stat("infergate.pool.llama.decisions"), 1);
    assert_eq!(gateway.envoy.stat("infergate.snapshot.generation"), 1);
    let explained = chosen.clone().unwrap_or_default();
    stream.respond(&explained, 200, "application/json", &[b"{}"]);
    assert!(stream.response_header(header::DECISION).is_some_and(|d| d.contains("llama")));
}

#[test]
fn a_clients_routing_headers_are_removed_before_the_decision() {
    let gateway = Gateway::new(1, false);
    let mut stream = gateway.routers[0].stream();
    let spoofed = [(header::ENDPOINT, "10.9.9.9:80"), (header::POOL, "other"), ("x-infergate-anything", "1")];
    stream.post_json("/v1/chat/completions", &spoofed, &chat("hi"));
    let endpoint = stream.request_header(header::ENDPOINT).unwrap_or_default().to_string();
    assert!(!endpoint.contains("10.9.9.9"), "{endpoint}");
    assert_eq!(stream.request_header(header::POOL), Some("llama"));
    assert_eq!(stream.request_header("x-infergate-anything"), None);
}

#[test]
fn bad_requests_get_openai_errors_and_count_as_rejected() {
    let gateway = Gateway::new(1, false);
    let cases: [(&[u8], u32, &str); 4] = [
        (b"{not json", 400, "invalid_json"),
        (br#"{"messages": []}"#, 400, "missing_required_parameter"),
        (br#"{"model": "nope", "prompt": "x"}"#, 404, "model_not_found"),
        (br#"{"model": 7}"#, 400, ""),
    ];
    for (body, status, code) in cases {
        let mut stream = gateway.routers[0].stream();
        let flow = stream.request("POST", "/v1/completions", &[], &[body]);
        let reply = stream.reply().unwrap_or_else(|| panic!("no reply to {}", String::from_utf8_lossy(body)));
        assert_eq!((flow, reply.status), (Flow::Pause, status), "{}", String::from_utf8_lossy(body));
        assert_eq!(reply.header("content-type"), Some("application/json"));
        let error = &reply.json()["error"];
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{error}");
        if !code.is_empty() {
            assert_eq!(error["code"], code, "{error}");
        }
    }
    assert_eq!(gateway.envoy.stat("infergate.requests.rejected"), 4);
    assert!(gateway.envoy.stat("infergate.requests.full_parses") >= 1);
}

#[test]
fn a_body_over_the_limit_is_refused_whether_declared_or_streamed() {
    let gateway = Gateway::new(1, false);
    let big = vec![b' '; 70 * 1024];
    let mut declared = gateway.routers[0].stream();
    declared.request("POST", "/v1/completions", &[], &[&big]);
    assert_eq!(declared.reply().map(|r| r.status), Some(413));
    // Chunked: no content-length, the limit trips on the buffered size.
    let mut chunked = gateway.routers[0].stream();
    let chunk = vec![b' '; 40 * 1024];
    chunked.request("POST", "/v1/completions", &[("content-length", "")], &[&chunk, &chunk]);
    assert_eq!(chunked.reply().map(|r| r.status), Some(413));
}

#[test]
fn a_body_split_over_callbacks_is_read_once_and_routed() {
    let gateway = Gateway::new(1, false);
    let body = chat(&long_prompt("split")).to_string().into_bytes();
    let (head, tail) = body.split_at(body.len() / 3);
    let mut stream = gateway.routers[0].stream();
    assert_eq!(stream.request("POST", "/v1/chat/completions", &[], &[head, tail]), Flow::Continue);
    assert!(stream.request_header(header::ENDPOINT).is_some());
    assert_eq!(gateway.envoy.stat("infergate.requests.full_parses"), 0);
}

#[test]
fn a_bad_criticality_header_is_refused_and_sheddable_is_shed_when_saturated() {
    let gateway = Gateway::new(1, false);
    let mut stream = gateway.routers[0].stream();
    stream.post_json("/v1/chat/completions", &[("x-infergate-criticality", "urgent")], &chat("hi"));
    let reply = stream.reply().map(|r| (r.status, r.json()["error"]["code"].clone()));
    assert_eq!(reply, Some((400, "invalid_criticality".into())));

    let saturated = PodSignals { waiting: Some(50.0), running: Some(8.0), kv_cache_usage: Some(0.99), ..idle() };
    let signals = [saturated.clone(), saturated.clone(), saturated];
    assert_eq!(gateway.push_snapshot(&snapshot(1, gateway.envoy.now_ms(), &signals)), 204);
    let mut shed = gateway.routers[0].stream();
    shed.post_json("/v1/chat/completions", &[("x-infergate-criticality", "sheddable")], &chat("hi"));
    let reply = shed.reply().map(|r| (r.status, r.header("retry-after").is_some()));
    assert_eq!(reply, Some((429, true)));
    assert_eq!(gateway.envoy.stat("infergate.requests.shed"), 1);
    // A standard request on the same pool still goes through.
    let (_, chosen) = gateway.route(0, "hi");
    assert!(chosen.is_some());
}

#[test]
fn models_are_listed_and_unknown_paths_get_404() {
    let gateway = Gateway::new(1, false);
    let mut list = gateway.routers[0].stream();
    assert_eq!(list.request("GET", "/v1/models", &[], &[]), Flow::Pause);
    let models = list.reply().map(|r| r.json()).unwrap_or_default();
    let names: Vec<&str> = models["data"].as_array().into_iter().flatten().filter_map(|m| m["id"].as_str()).collect();
    assert!(names.contains(&crate::test_support::MODEL) && names.contains(&"sql-lora"), "{names:?}");
    let mut unknown = gateway.routers[0].stream();
    unknown.request("POST", "/v2/whatever", &[], &[b"{}"]);
    assert_eq!(unknown.reply().map(|r| r.status), Some(404));
}

#[test]
fn an_undecodable_snapshot_keeps_the_previous_one() {
    let gateway = Gateway::new(1, false);
    let now = gateway.envoy.now_ms();
    assert_eq!(gateway.push_snapshot(&snapshot(1, now, &[idle(), idle(), idle()])), 204);
    gateway.route(0, "first");
    // Garbage published behind the control listener's back (it refuses garbage).
    gateway.envoy.set_shared_value(shared_data::SNAPSHOT, b"\xff\x00garbage");
    gateway.envoy.set_shared_value(shared_data::GENERATION, &2u64.to_le_bytes());
    take_logs();
    let (_, chosen) = gateway.route(0, "second");
    assert!(chosen.is_some());
    assert_eq!(gateway.envoy.stat("infergate.snapshot.decode_failures"), 1);
    assert_eq!(gateway.envoy.stat("infergate.decisions.signals"), 2, "still on the previous snapshot's signals");
    assert!(take_logs().iter().any(|l| l.contains("does not decode, keeping the previous one")));
}

#[test]
fn in_flight_counts_are_shared_by_the_workers_and_released_at_the_end() {
    let gateway = Gateway::new(2, false);
    assert_eq!(gateway.push_snapshot(&snapshot(1, gateway.envoy.now_ms(), &[idle(), idle(), idle()])), 204);
    let mut streams = Vec::new();
    let mut chosen = Vec::new();
    for i in 0..3 {
        let (stream, pod) = gateway.route(i % 2, &format!("request {i}"));
        streams.push(stream);
        chosen.extend(pod);
    }
    chosen.sort();
    chosen.dedup();
    assert_eq!(chosen.len(), 3, "three requests over two workers spread over the three idle pods: {chosen:?}");
    assert_eq!(PODS.iter().map(|p| in_flight(&gateway, p)).sum::<u64>(), 3);
    for stream in &mut streams {
        stream.end();
    }
    assert_eq!(PODS.iter().map(|p| in_flight(&gateway, p)).sum::<u64>(), 0);
}

/// Two workers on three idle pods, both among the prefix peers (a worker joins them
/// with its first request; worker 0 joins with the test's first).
fn two_joined_workers() -> Gateway {
    let gateway = Gateway::new(2, false);
    assert_eq!(gateway.push_snapshot(&snapshot(1, gateway.envoy.now_ms(), &[idle(), idle(), idle()])), 204);
    gateway.route(1, "join").0.end();
    gateway
}

#[test]
fn a_prefix_recorded_on_one_worker_routes_the_next_turn_on_another() {
    let gateway = two_joined_workers();
    let prompt = long_prompt("conversation");
    let (mut first, pod) = gateway.route(0, &prompt);
    let pod = pod.unwrap_or_default();
    first.respond(&pod, 200, "application/json", &[b"{}"]);
    first.end();
    assert_eq!(gateway.envoy.deliver(), 1, "the record reached the other worker's queue");
    for turn in 0..3 {
        let (mut next, chosen) = gateway.route(1, &format!("{prompt} turn {turn}"));
        assert_eq!(chosen.as_deref(), Some(pod.as_str()), "turn {turn}");
        next.end();
    }
    assert!(gateway.envoy.stat("infergate.pool.llama.prefix_hits") >= 3);
}

/// Regression: a worker joins the prefix peers at its first request, so the records
/// the others sent before then reached no queue of its, and a conversation's next turn
/// that was an idle worker's first request (a new connection) missed its pod. The real
/// vLLM end-to-end test failed that way in CI.
#[test]
fn a_workers_first_request_finds_the_prefixes_the_others_recorded_before() {
    let gateway = Gateway::new(2, false);
    assert_eq!(gateway.push_snapshot(&snapshot(1, gateway.envoy.now_ms(), &[idle(), idle(), idle()])), 204);
    let prompts: Vec<String> = (0..3).map(|i| long_prompt(&format!("conversation {i}"))).collect();
    let mut pods = Vec::new();
    let mut firsts = Vec::new();
    for prompt in &prompts {
        // Past the batching period, so that each first turn's record leaves at once.
        gateway.envoy.advance_ms(FLUSH_PERIOD_MS);
        let (mut first, pod) = gateway.route(0, prompt);
        let pod = pod.unwrap_or_default();
        // Still in flight when the next conversation starts, so each takes an idle pod.
        first.respond(&pod, 200, "application/json", &[b"{}"]);
        firsts.push(first);
        pods.push(pod);
    }
    firsts.iter_mut().for_each(Stream::end);
    assert_eq!(gateway.envoy.deliver(), 0, "worker 1 has not joined: no queue got the records");
    let mut distinct = pods.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "the first turns took one pod each: {pods:?}");
    for (i, (prompt, pod)) in prompts.iter().zip(&pods).enumerate() {
        let (mut next, chosen) = gateway.route(1, &format!("{prompt} next turn"));
        assert_eq!(chosen.as_deref(), Some(pod.as_str()), "conversation {i}");
        next.end();
    }
}

#[test]
fn records_wait_for_the_tick_under_load_then_go_in_one_batch() {
    let gateway = two_joined_workers();
    for i in 0..3 {
        let (mut stream, pod) = gateway.route(0, &long_prompt(&format!("topic{i}")));
        stream.respond(&pod.unwrap_or_default(), 200, "application/json", &[b"{}"]);
        stream.end();
    }
    // The first went at once; the next two wait for the 5 ms tick.
    assert_eq!(gateway.envoy.stat("infergate.prefix.batches"), 1);
    assert_eq!(gateway.routers[0].tick_period_ms(), 5);
    gateway.envoy.advance_ms(5);
    assert_eq!(gateway.envoy.stat("infergate.prefix.batches"), 2);
    assert_eq!(gateway.envoy.stat("infergate.prefix.enqueued"), 2, "one peer per batch");
    assert_eq!(gateway.routers[0].tick_period_ms(), 0, "the tick stops once nothing waits");
}

/// Regression (ed2fbf9): a torn-down router kept its queue on the peer list, and the
/// others sent every record to it, where nothing drained it.
#[test]
fn a_torn_down_worker_leaves_the_prefix_peers() {
    let gateway = Gateway::new(3, false);
    assert_eq!(gateway.push_snapshot(&snapshot(1, gateway.envoy.now_ms(), &[idle(), idle(), idle()])), 204);
    for worker in 0..3 {
        gateway.route(worker, "join").0.end();
    }
    gateway.routers[2].tear_down();
    let (mut stream, pod) = gateway.route(0, &long_prompt("after the reload"));
    stream.respond(&pod.unwrap_or_default(), 200, "application/json", &[b"{}"]);
    let queued = gateway.envoy.queued(queue::PREFIX_PREFIX);
    assert_eq!(queued.values().sum::<usize>(), 1, "one record, for the one live peer: {queued:?}");
    assert_eq!(gateway.envoy.stat("infergate.prefix.enqueued"), 1);
}

/// Regression (8b92315): each worker set the memory gauge to its own VM's size, so it
/// showed whichever reported last instead of the sum.
#[test]
fn the_vm_memory_gauge_sums_the_workers_and_drops_a_torn_down_one() {
    let gateway = Gateway::new(2, false);
    gateway.routers[0].set_memory_bytes(1 << 20);
    gateway.routers[1].set_memory_bytes(3 << 20);
    assert_eq!(gateway.push_snapshot(&snapshot(1, gateway.envoy.now_ms(), &[idle(), idle(), idle()])), 204);
    gateway.route(0, "a");
    gateway.route(1, "b");
    assert_eq!(gateway.envoy.stat("infergate.vm.memory_bytes"), 4 << 20);
    gateway.routers[0].set_memory_bytes(2 << 20);
    assert_eq!(gateway.push_snapshot(&snapshot(2, gateway.envoy.now_ms(), &[idle(), idle(), idle()])), 204);
    gateway.route(0, "c");
    assert_eq!(gateway.envoy.stat("infergate.vm.memory_bytes"), 5 << 20);
    gateway.routers[1].tear_down();
    assert_eq!(gateway.envoy.stat("infergate.vm.memory_bytes"), 2 << 20);
}

#[test]
fn a_streams_first_chunk_is_timed_against_its_prediction() {
    let gateway = Gateway::new(1, false);
    assert_eq!(gateway.push_snapshot(&snapshot(1, gateway.envoy.now_ms(), &[idle(), idle(), idle()])), 204);
    let (mut stream, pod) = gateway.route(0, "time me");
    let pod = pod.unwrap_or_default();
    stream.respond_headers(&pod, 200, "text/event-stream", false);
    gateway.envoy.advance_ms(250);
    stream.respond_chunk(b"data: {}\n\n", false);
    gateway.envoy.advance_ms(100);
    stream.respond_chunk(b"data: [DONE]\n\n", true);
    assert_eq!(gateway.envoy.samples("infergate.pool.llama.ttft_observed_ms"), vec![250]);
    assert_eq!(gateway.envoy.samples("infergate.pool.llama.ttft_abs_error_ms").len(), 1);
    assert!(gateway.envoy.stat("infergate.pool.llama.ttft_factor_milli") > 1000, "slower than predicted");
}

#[test]
fn a_claim_reaches_the_other_workers_at_the_decision_before_any_answer() {
    let gateway = two_joined_workers();
    let prompt = long_prompt("a new system prompt");
    let (mut prefilling, pod) = gateway.route(0, &prompt);
    assert_eq!(gateway.envoy.deliver(), 1, "the claim reached the other worker's queue");
    // Its load gone, only the claim can steer the next request of the group.
    prefilling.end();
    for user in 0..3 {
        let (mut second, chosen) = gateway.route(1, &format!("{prompt} user {user}"));
        assert_eq!(chosen, pod, "user {user}: the group follows the claim");
        second.end();
    }
}

#[test]
fn a_retry_answered_by_another_pod_moves_the_claim_there() {
    let gateway = two_joined_workers();
    let prompt = long_prompt("retried");
    let (mut stream, pod) = gateway.route(0, &prompt);
    let other = PODS.iter().find(|p| Some(**p) != pod.as_deref()).copied().unwrap_or_default();
    stream.respond(other, 200, "application/json", &[b"{}"]);
    stream.end();
    gateway.envoy.advance_ms(5);
    assert_eq!(gateway.envoy.stat("infergate.prefix.batches"), 2, "the claim, then the pod that answered");
    let queued = gateway.envoy.queued(queue::PREFIX_PREFIX);
    assert_eq!(queued.values().sum::<usize>(), 2, "both records wait on the other worker's queue: {queued:?}");
}

#[test]
fn an_answer_from_the_chosen_pod_sends_nothing_more() {
    let gateway = two_joined_workers();
    let (mut stream, pod) = gateway.route(0, &long_prompt("answered"));
    stream.respond(&pod.unwrap_or_default(), 200, "application/json", &[b"{}"]);
    stream.end();
    gateway.envoy.advance_ms(5);
    assert_eq!(gateway.envoy.stat("infergate.prefix.batches"), 1, "the claim only");
}

#[test]
fn host_calls_that_fail_are_logged_and_the_request_still_flows() {
    let gateway = two_joined_workers();
    take_logs();
    gateway.envoy.fail("set_request_header");
    let (mut stream, _) = gateway.route(0, "no headers");
    assert!(take_logs().iter().any(|l| l.contains("cannot set routing headers")));
    gateway.envoy.heal("set_request_header");
    stream.end();

    gateway.envoy.fail("enqueue");
    let (mut stream, pod) = gateway.route(0, &long_prompt("unsent"));
    stream.respond(&pod.unwrap_or_default(), 200, "application/json", &[b"{}"]);
    stream.end();
    assert_eq!(gateway.envoy.stat("infergate.prefix.enqueued"), 0);
    gateway.envoy.heal("enqueue");

    gateway.envoy.fail("send_reply");
    let mut refused = gateway.routers[0].stream();
    assert_eq!(refused.request("POST", "/v1/completions", &[], &[b"{bad"]), Flow::Pause);
    assert!(take_logs().iter().any(|l| l.contains("could not send a 400 reply")));
}

#[test]
fn a_router_whose_queue_cannot_register_still_routes() {
    let gateway = Gateway::new(1, false);
    gateway.envoy.fail("register_queue");
    let (_, chosen) = gateway.route(0, "alone");
    assert!(chosen.is_some());
    assert!(take_logs().iter().any(|l| l.contains("prefix records from other workers are lost")));
}

#[test]
fn an_invalid_router_configuration_is_refused_with_its_field() {
    let envoy = crate::host::fake::FakeEnvoy::new();
    let mut config: serde_json::Value = serde_json::from_slice(&crate::test_support::router_config(false)).unwrap();
    config["routing"]["pools"] = serde_json::json!([]);
    let worker = envoy.start("infergate", config.to_string().as_bytes());
    assert!(!worker.configured());
    assert!(take_logs().iter().any(|l| l.contains("invalid plugin configuration: routing.")), "{:?}", take_logs());
}

#[test]
fn the_pools_characters_per_token_are_learned_from_streamed_and_whole_answers_usage() {
    let gateway = Gateway::new(1, false);
    assert_eq!(gateway.push_snapshot(&snapshot(1, gateway.envoy.now_ms(), &[idle(), idle(), idle()])), 204);
    let prompt = long_prompt("tokenizer");
    let chars = prompt.len();
    // A stream: the usage event comes last, before [DONE].
    let (mut stream, pod) = gateway.route(0, &prompt);
    let pod = pod.unwrap_or_default();
    stream.respond_headers(&pod, 200, "text/event-stream", false);
    stream.respond_chunk(b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n", false);
    let usage = format!(
        "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{},\"completion_tokens\":2}}}}\n\ndata: [DONE]\n\n",
        chars / 7
    );
    stream.respond_chunk(usage.as_bytes(), true);
    let learned = gateway.envoy.stat("infergate.pool.llama.chars_per_token_milli");
    assert!((6_900..=7_100).contains(&learned), "7 characters a token, × 1000: {learned}");
    // A whole answer, in one chunk, moves it too.
    let (mut whole, pod) = gateway.route(0, &prompt);
    let body = format!("{{\"choices\":[],\"usage\":{{\"prompt_tokens\":{},\"completion_tokens\":1}}}}", chars / 5);
    whole.respond(&pod.unwrap_or_default(), 200, "application/json", &[body.as_bytes()]);
    let learned = gateway.envoy.stat("infergate.pool.llama.chars_per_token_milli");
    assert!((5_900..=6_100).contains(&learned), "the mean of 7 and 5, × 1000: {learned}");
    // A failed answer teaches nothing.
    let (mut failed, pod) = gateway.route(0, &prompt);
    failed.respond(&pod.unwrap_or_default(), 500, "application/json", &[br#"{"usage":{"prompt_tokens":9999}}"#]);
    assert_eq!(gateway.envoy.stat("infergate.pool.llama.chars_per_token_milli"), learned);
}

#[test]
fn an_adapter_load_one_worker_started_claims_the_slot_on_the_other() {
    // Two LoRA slots per pod, one running "other" on each: pod 1 has nothing queued,
    // pods 2 and 3 four requests each. Worker 0 sends "sql-lora" to pod 1's free slot;
    // its record reaches worker 1, which then finds that slot claimed for its
    // "chat-lora" request and picks another pod. Before the load rode in the record,
    // worker 1 sent it to the same slot 20 ms later (3.7 s in part 2's bench).
    let gateway = Gateway::new(2, false);
    let mut routing = crate::test_support::routing();
    routing.models.push(infergate_core::config::ModelConfig {
        name: "chat-lora".into(),
        pool: crate::test_support::POOL.into(),
        adapter: Some("chat-lora".into()),
        criticality: Default::default(),
    });
    let lora = |waiting: f64| PodSignals {
        waiting: Some(waiting),
        running: Some(1.0),
        running_adapters: vec!["other".into()],
        max_loras: Some(2),
        ..PodSignals::default()
    };
    let signals = [lora(0.0), lora(4.0), lora(4.0)];
    let now = gateway.envoy.now_ms();
    assert_eq!(gateway.push_snapshot(&crate::test_support::snapshot_with(1, now, &signals, routing)), 204);
    gateway.route(1, "join").0.end();
    gateway.envoy.advance_ms(5);
    gateway.envoy.deliver();

    let (mut sql, sql_pod) = gateway.route_model(0, "sql-lora", "hi");
    assert_eq!(sql_pod.as_deref(), Some(PODS[0]), "the free slot with no queue");
    gateway.envoy.advance_ms(5);
    assert!(gateway.envoy.deliver() >= 1, "the claim reached worker 1");
    let (mut chat, chat_pod) = gateway.route_model(1, "chat-lora", "hi");
    assert!(chat_pod.is_some_and(|p| p != PODS[0]), "pod 1's last slot is claimed by sql-lora");
    sql.end();
    chat.end();
}

#[test]
fn the_pods_counted_prefix_hits_are_reported_beside_the_routers_belief() {
    // Two turns of one long conversation: the second is believed almost wholly cached
    // on its pod. The pods' counters then say they found half the prompt tokens they
    // were asked for: found ÷ believed is exported per pool.
    let gateway = Gateway::new(1, false);
    let counted = |queries: f64, hits: f64| PodSignals {
        prefix_cache_queries: Some(queries),
        prefix_cache_hits: Some(hits),
        ..idle()
    };
    let now = gateway.envoy.now_ms();
    assert_eq!(
        gateway.push_snapshot(&snapshot(1, now, &[counted(0.0, 0.0), counted(0.0, 0.0), counted(0.0, 0.0)])),
        204
    );
    let history = "a long conversation about the fleet ".repeat(1_000);
    let (mut turn, first) = gateway.route(0, &history);
    // Its first token: its prefill no longer waits on the pod.
    turn.respond_headers(first.as_deref().unwrap_or_default(), 200, "text/event-stream", false);
    turn.respond_chunk(b"data: {}\n\n", false);
    let (_, second) = gateway.route(0, &format!("{history} and its next turn"));
    assert!(first.is_some() && first == second, "the next turn goes to its pod");
    gateway.envoy.advance_ms(1_000);
    let now = gateway.envoy.now_ms();
    let half = counted(40_000.0, 20_000.0);
    assert_eq!(gateway.push_snapshot(&snapshot(2, now, &[half.clone(), half.clone(), half])), 204);
    gateway.route(0, "a third request reads the new snapshot");
    let milli = gateway.envoy.stat("infergate.pool.llama.prefix_found_per_believed_milli");
    // Believed: about half of the two turns' tokens (the second turn, cached); found:
    // half of what was asked: about 1000.
    assert!((800..=1_200).contains(&milli), "{milli}");
}
