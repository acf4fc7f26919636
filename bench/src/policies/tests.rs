//! Each baseline on a tiny hand-made fleet state picks what its published formula says.

use infergate_core::snapshot::PodSignals;
use infergate_model_sim::engine::{Engine, EngineProfile, SimRequest};

use super::*;
use crate::fleet::{FleetConfig, Scraper};
use crate::request::{Arrival, BenchRequest, render};
use crate::workloads::BASE_MODEL;

fn request(prompt: &str) -> BenchRequest {
    BenchRequest {
        arrival: Arrival::At(0.0),
        model: BASE_MODEL.into(),
        adapter: None,
        prompt: render(&[("user", prompt)]).into(),
        output_tokens: 10,
        session: None,
    }
}

fn engines(n: usize) -> Vec<Engine> {
    (0..n).map(|_| Engine::new(EngineProfile::TINY)).collect()
}

/// A scrape whose signals are replaced by hand-made ones.
fn scrape_with(signals: Vec<PodSignals>) -> ScrapeView {
    let engines = engines(signals.len());
    let fleet = FleetConfig::new(signals.len(), &[]);
    let mut view = Scraper::new(signals.len()).scrape(&engines, &fleet, 0.0);
    view.signals = signals.into_iter().map(Some).collect();
    view
}

fn pick(
    policy: &mut dyn Policy,
    req: &BenchRequest,
    engines: &[Engine],
    scrape: &ScrapeView,
    in_flight: &[u32],
) -> usize {
    policy.pick(&PickContext { id: 0, request: req, now: 0.0, engines, scrape, in_flight })
}

fn signals(waiting: f64, kv: f64) -> PodSignals {
    PodSignals { waiting: Some(waiting), kv_cache_usage: Some(kv), ..PodSignals::default() }
}

#[test]
fn round_robin_cycles() {
    let e = engines(3);
    let s = scrape_with(vec![signals(0.0, 0.0); 3]);
    let mut p = RoundRobin::default();
    let picks: Vec<usize> = (0..4).map(|_| pick(&mut p, &request("x"), &e, &s, &[0; 3])).collect();
    assert_eq!(picks, [0, 1, 2, 0]);
}

#[test]
fn envoys_round_robin_keeps_a_cursor_per_worker() {
    let e = engines(4);
    let s = scrape_with(vec![signals(0.0, 0.0); 4]);
    // One worker: a plain cycle, from wherever its seed starts it.
    let mut one = RoundRobin::envoy(1, 7);
    let picks: Vec<usize> = (0..8).map(|_| pick(&mut one, &request("x"), &e, &s, &[0; 4])).collect();
    assert!(picks.windows(2).all(|w| w[1] == (w[0] + 1) % 4), "{picks:?}");
    // Two workers: every pod still gets its share, but the two cursors interleave, so a
    // pod sometimes takes two requests in a row, which one cursor never does.
    let mut two = RoundRobin::envoy(2, 7);
    let picks: Vec<usize> = (0..4000).map(|_| pick(&mut two, &request("x"), &e, &s, &[0; 4])).collect();
    for pod in 0..4 {
        let share = picks.iter().filter(|&&p| p == pod).count();
        assert!((800..=1200).contains(&share), "pod {pod} took {share} of 4000");
    }
    let repeats = picks.windows(2).filter(|w| w[0] == w[1]).count();
    assert!(repeats > 200, "{repeats} repeats in 4000 picks");
}

#[test]
fn least_request_takes_the_less_loaded_of_two() {
    let e = engines(2);
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    let mut p = LeastRequest::new(1);
    for _ in 0..20 {
        assert_eq!(pick(&mut p, &request("x"), &e, &s, &[5, 1]), 1);
    }
}

#[test]
fn gie_default_has_no_saturation_filter() {
    let e = engines(2);
    // Pod 0's KV use (0.85) is over the old filter's 0.8, but it scores best:
    // 2·1 + 2·0.15 = 2.3 against pod 1's 2·0 + 2·0.9 = 1.8.
    let s = scrape_with(vec![signals(0.0, 0.85), signals(3.0, 0.1)]);
    for seed in 0..5 {
        assert_eq!(pick(&mut GieDefault::new(2, seed), &request("x"), &e, &s, &[0; 2]), 0);
    }
}

#[test]
fn gie_default_weighs_queue_2_and_kv_2() {
    let e = engines(3);
    // Queue scores 0, 1, 0.5: pod 1 = 2·1 + 2·0.5 = 3.0 beats pod 2 = 2·0.5 + 2·0.9 = 2.8.
    let s = scrape_with(vec![signals(6.0, 0.1), signals(0.0, 0.5), signals(3.0, 0.1)]);
    assert_eq!(pick(&mut GieDefault::new(3, 1), &request("y"), &e, &s, &[0; 3]), 1);
}

#[test]
fn gie_default_follows_its_own_past_choices_for_a_prefix() {
    let e = engines(2);
    let s = scrape_with(vec![signals(1.0, 0.3), signals(1.0, 0.3)]);
    let mut p = GieDefault::new(2, 7);
    let prompt = "a long shared system prompt ".repeat(20);
    let first = pick(&mut p, &request(&prompt), &e, &s, &[0; 2]);
    for _ in 0..5 {
        assert_eq!(pick(&mut p, &request(&prompt), &e, &s, &[0; 2]), first);
    }
}

#[test]
fn gie_default_hashes_a_partial_last_block() {
    // A 10-byte prompt is one partial 256-byte block: it is indexed all the same.
    let e = engines(4);
    let s = scrape_with(vec![signals(0.0, 0.0); 4]);
    let mut p = GieDefault::new(4, 3);
    let first = pick(&mut p, &request("hi"), &e, &s, &[0; 4]);
    for _ in 0..10 {
        assert_eq!(pick(&mut p, &request("hi"), &e, &s, &[0; 4]), first);
    }
}

#[test]
fn gie_default_sizes_each_pods_lru_from_num_gpu_blocks() {
    let e = engines(2);
    // 608 bytes: three blocks of 256 bytes, the last one partial.
    let req = request(&"a".repeat(600));
    let with_blocks = |waiting: [f64; 2], blocks: Option<u64>| {
        scrape_with(
            waiting
                .iter()
                .map(|&w| PodSignals { waiting: Some(w), num_gpu_blocks: blocks, ..PodSignals::default() })
                .collect(),
        )
    };
    for (blocks, expected) in [(None, 0), (Some(2), 1)] {
        let mut p = GieDefault::new(2, 1);
        // The queue sends the first request to pod 0, the second's queue favours pod 1,
        // but a full prefix match (3) outweighs the queue (2) unless pod 0's LRU of
        // `blocks` entries has dropped the leading block.
        assert_eq!(pick(&mut p, &req, &e, &with_blocks([0.0, 1.0], blocks), &[0; 2]), 0);
        assert_eq!(pick(&mut p, &req, &e, &with_blocks([1.0, 0.0], blocks), &[0; 2]), expected, "{blocks:?}");
    }
}

/// Pods whose engines publish KV events, as the exact-cache peers need.
fn engines_with_kv_events(n: usize) -> Vec<Engine> {
    (0..n).map(|_| Engine::new(EngineProfile::TINY).recording_kv_events()).collect()
}

/// Runs `prompt` to completion on `engine`, so its blocks are cached there; the time
/// its last step ended.
fn cache_on(engine: &mut Engine, prompt: &[u8]) -> f64 {
    engine.submit(SimRequest::from_text(1, 0.0, prompt, 1, None, 16));
    let mut now = 0.0;
    while let Some(step) = engine.step(now) {
        now += step.duration;
    }
    now
}

fn pick_at(policy: &mut dyn Policy, req: &BenchRequest, engines: &[Engine], scrape: &ScrapeView, now: f64) -> usize {
    let in_flight = vec![0; engines.len()];
    policy.pick(&PickContext { id: 0, request: req, now, engines, scrape, in_flight: &in_flight })
}

#[test]
fn llmd_precise_uses_the_cache_its_kv_events_describe() {
    let mut e = engines_with_kv_events(2);
    let req = request(&"cached prompt text ".repeat(30));
    let done = cache_on(&mut e[1], &req.prompt.bytes());
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    assert_eq!(pick_at(&mut LlmdPrecise::new(1), &req, &e, &s, done + KV_EVENT_LAG_S), 1);
}

#[test]
fn the_exact_cache_peers_see_a_prompt_only_once_its_events_arrive() {
    let mut e = engines_with_kv_events(2);
    let req = request(&"cached prompt text ".repeat(30));
    let done = cache_on(&mut e[1], &req.prompt.bytes());
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    // Before the lag, both pods look cold: ties at random, so over seeds both are picked.
    let before = done + KV_EVENT_LAG_S / 2.0;
    let picks: Vec<usize> = (0..16).map(|seed| pick_at(&mut LlmdPrecise::new(seed), &req, &e, &s, before)).collect();
    assert!(picks.contains(&0) && picks.contains(&1), "{picks:?}");
    // Without recorded events (the engines' exact cache is not read), never the pod.
    let mut quiet = engines(2);
    let done = cache_on(&mut quiet[1], &req.prompt.bytes());
    let picks: Vec<usize> =
        (0..16).map(|seed| pick_at(&mut DynamoKv::new(seed), &req, &quiet, &s, done + 1.0)).collect();
    assert!(picks.contains(&0), "{picks:?}");
}

#[test]
fn llmd_precise_reads_queue_and_kv_from_the_scrape() {
    let mut e = engines(2);
    // Pod 1 is busy now, but the last scrape saw it idle and pod 0 queued.
    for id in 0..20 {
        e[1].submit(SimRequest::from_text(id, 0.0, "q".repeat(4000).as_bytes(), 50, None, 16));
    }
    let s = scrape_with(vec![signals(4.0, 0.5), signals(0.0, 0.0)]);
    for seed in 0..5 {
        assert_eq!(pick(&mut LlmdPrecise::new(seed), &request("x"), &e, &s, &[0; 2]), 1);
    }
}

#[test]
fn sglang_sends_a_miss_to_the_least_loaded_worker_not_the_smallest_tree() {
    let e = engines(2);
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    let mut p = SglangCacheAware::new(2);
    assert_eq!(pick(&mut p, &request(&"one ".repeat(40)), &e, &s, &[0, 0]), 0);
    // Pod 0 holds the bigger tree, but it is the less loaded.
    assert_eq!(pick(&mut p, &request(&"two ".repeat(40)), &e, &s, &[0, 3]), 0);
}

#[test]
fn sglang_breaks_load_ties_by_requests_routed_then_index() {
    let e = engines(3);
    let s = scrape_with(vec![signals(0.0, 0.0); 3]);
    let mut p = SglangCacheAware::new(3);
    let picks: Vec<usize> =
        ["a", "b", "c", "d"].iter().map(|c| pick(&mut p, &request(&c.repeat(50)), &e, &s, &[0; 3])).collect();
    assert_eq!(picks, [0, 1, 2, 0]);
}

#[test]
fn sglang_matches_characters_against_a_0_3_threshold() {
    let e = engines(2);
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    let mut p = SglangCacheAware::new(2);
    let base = "abcdefghij".repeat(10);
    assert_eq!(pick(&mut p, &request(&base), &e, &s, &[0, 0]), 0);
    // 35 of 100 characters match: the tree's worker, though it is the more loaded.
    let hit = format!("{}{}", &base[..35], "z".repeat(65));
    assert_eq!(pick(&mut p, &request(&hit), &e, &s, &[5, 0]), 0);
    // 25 of 100: a miss, so the least loaded.
    let miss = format!("{}{}", &base[..25], "y".repeat(75));
    assert_eq!(pick(&mut p, &request(&miss), &e, &s, &[5, 0]), 1);
}

#[test]
fn sglang_goes_least_loaded_when_imbalanced() {
    let e = engines(2);
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    let mut p = SglangCacheAware::new(2);
    let prompt = "shared ".repeat(50);
    assert_eq!(pick(&mut p, &request(&prompt), &e, &s, &[0, 0]), 0);
    assert_eq!(pick(&mut p, &request(&prompt), &e, &s, &[30, 0]), 0, "a match follows the tree");
    assert_eq!(pick(&mut p, &request(&prompt), &e, &s, &[100, 70]), 0, "100 − 70 ≤ 64: balanced");
    assert_eq!(pick(&mut p, &request(&prompt), &e, &s, &[100, 10]), 1, "100 − 10 > 64 and 100 > 1.5 × 10");
}

#[test]
fn sglang_routes_on_the_message_contents_joined_by_spaces() {
    let prompt = render(&[("system", "be brief"), ("user", ""), ("assistant", "ok"), ("user", "hi")]);
    assert_eq!(sglang_cache_aware::routing_text(&prompt), "be brief ok hi");
}

#[test]
fn sglang_tree_evicts_each_workers_least_recently_used_leaves() {
    let mut tree = sglang_cache_aware::Tree::default();
    tree.insert("abcdef", 0);
    tree.insert("abcxyz", 0);
    tree.insert("abcdef", 1);
    assert_eq!((tree.chars_of(0), tree.chars_of(1)), (9, 6));
    tree.evict(6);
    // Worker 0 lost "def", its oldest leaf; worker 1, within the cap, kept it.
    assert_eq!((tree.chars_of(0), tree.chars_of(1)), (6, 6));
    let m = tree.match_and_insert_with("abcdef", |_| None);
    assert_eq!((m.matched_chars, m.input_chars, m.worker), (6, 6, Some(1)));
    tree.evict(3);
    let m = tree.match_and_insert_with("abcdef", |_| None);
    assert_eq!(m.matched_chars, 3, "\"def\" went with its last holder");
}

fn pick_id(policy: &mut dyn Policy, id: usize, req: &BenchRequest, engines: &[Engine], scrape: &ScrapeView) -> usize {
    let in_flight = vec![0; engines.len()];
    policy.pick(&PickContext { id, request: req, now: 0.0, engines, scrape, in_flight: &in_flight })
}

/// Dynamo after routing a 10-block prompt (id 0) and then a 40-block one (id 1), which
/// goes to the other pod: the policy, the two requests, and (pod of id 0, pod of id 1).
fn dynamo_with_two_routed(e: &[Engine], s: &ScrapeView) -> (DynamoKv, BenchRequest, BenchRequest, usize, usize) {
    // `<|user|>` and the content: 640 bytes = 160 tokens = 10 blocks; 2,560 bytes = 40.
    let (short, long) = (request(&"q".repeat(632)), request(&"p".repeat(2552)));
    let mut p = DynamoKv::new(5);
    let y = pick_id(&mut p, 0, &short, e, s);
    // The long one: 640/16 + 40 = 80 on the idle pod, (160 + 640)/16 + 10 + 40 = 100 on y.
    let x = pick_id(&mut p, 1, &long, e, s);
    assert_eq!(x, 1 - y);
    (p, short, long, y, x)
}

#[test]
fn dynamo_credits_the_overlap_its_kv_events_describe() {
    let mut e = engines_with_kv_events(2);
    let req = request(&"overlap me please ".repeat(40));
    let done = cache_on(&mut e[0], &req.prompt.bytes());
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    let pod = pick_at(&mut DynamoKv::new(1), &req, &e, &s, done + KV_EVENT_LAG_S);
    assert_eq!(pod, 0, "overlap lowers pod 0's prefill cost");
}

#[test]
fn dynamo_counts_its_own_prefill_tokens_until_the_first_token() {
    let e = engines(2);
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    let (mut p, _, long, y, _) = dynamo_with_two_routed(&e, &s);
    // x: (640 + 640)/16 + 40 = 120 against y: (160 + 640)/16 + 10 + 40 = 100.
    assert_eq!(pick_id(&mut p, 2, &long, &e, &s), y);
}

#[test]
fn dynamo_counts_the_incoming_blocks_once_in_the_decode_term() {
    let e = engines(2);
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    let (mut p, short, long, y, x) = dynamo_with_two_routed(&e, &s);
    p.on_first_token(0, y, &short, 0.0);
    p.on_first_token(1, x, &long, 0.0);
    // x: 640/16 + 40 active + 0 additional = 80 against y: 40 + 10 + 40 = 90. Counting
    // the request's blocks again on x (120), or not at all (x 80, y 50), would pick y.
    assert_eq!(pick_id(&mut p, 2, &long, &e, &s), x);
}

#[test]
fn dynamo_frees_a_requests_blocks_when_it_finishes() {
    let e = engines(2);
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    let (mut p, short, long, y, x) = dynamo_with_two_routed(&e, &s);
    p.on_first_token(0, y, &short, 0.0);
    p.on_first_token(1, x, &long, 0.0);
    p.on_finish(1, x);
    // A new 10-block prompt: x 10 + 0 + 10 = 20 against y 10 + 10 + 10 = 30.
    assert_eq!(pick_id(&mut p, 2, &request(&"r".repeat(632)), &e, &s), x);
}

#[test]
fn the_oracle_picks_the_idle_pod() {
    let mut e = engines(2);
    for id in 0..20 {
        e[0].submit(SimRequest::from_text(id, 0.0, "q".repeat(4000).as_bytes(), 50, None, 16));
    }
    let s = scrape_with(vec![signals(0.0, 0.0); 2]);
    assert_eq!(pick(&mut Oracle, &request("hello"), &e, &s, &[0; 2]), 1);
}

/// A conversation's first turn on replica 0, then its next turn on replica 1, after
/// `scrapes` scrapes of an idle fleet.
fn follow_up_behind_two_replicas(scrapes: usize) -> (usize, usize) {
    let e = engines(4);
    let fleet = FleetConfig::new(4, &[]);
    let mut scraper = Scraper::new(4);
    let mut replicas = InfergateReplicas::new(&fleet, 42, 2);
    let mut scrape = scraper.scrape(&e, &fleet, 0.0);
    replicas.on_scrape(&scrape, 0.0);
    let history = "a long system prompt and a first question ".repeat(100);
    let first = request(&history);
    let first_pod = pick_id(&mut replicas, 0, &first, &e, &scrape);
    // The first turn is answered before the next is asked.
    replicas.on_first_token(0, first_pod, &first, 0.01);
    replicas.on_finish(0, first_pod);
    for i in 1..=scrapes {
        scrape = scraper.scrape(&e, &fleet, i as f64 * 0.05);
        replicas.on_scrape(&scrape, i as f64 * 0.05);
    }
    let next = BenchRequest {
        arrival: Arrival::After { previous: 0, think_s: 1.0 },
        prompt: render(&[("user", &history), ("assistant", "an answer"), ("user", "and then?")]).into(),
        ..request("")
    };
    (first_pod, pick_id(&mut replicas, 1, &next, &e, &scrape))
}

#[test]
fn replicas_learn_each_others_claims_one_scrape_late() {
    // Replica 0 reports its claim in its answer to the next push; the push after
    // brings it to replica 1, which then sends the next turn to the same pod.
    let (first, next) = follow_up_behind_two_replicas(2);
    assert_eq!(next, first, "replica 1 should know replica 0's claim after two scrapes");
    // Before that, replica 1 has not heard of it and keeps to its own share of the pods.
    let (first, next) = follow_up_behind_two_replicas(1);
    assert_ne!(next, first, "replica 1 cannot know the claim one scrape after it");
}

#[test]
fn one_replica_routes_as_infergate_alone() {
    let e = engines(3);
    let fleet = FleetConfig::new(3, &[]);
    let scrape = Scraper::new(3).scrape(&e, &fleet, 0.0);
    let (mut alone, mut replica) = (Infergate::new(&fleet, 42), InfergateReplicas::new(&fleet, 42, 1));
    alone.on_scrape(&scrape, 0.0);
    replica.on_scrape(&scrape, 0.0);
    for id in 0..12 {
        let req = request(&format!("prompt {} ", id % 4).repeat(40 + id));
        assert_eq!(pick_id(&mut replica, id, &req, &e, &scrape), pick_id(&mut alone, id, &req, &e, &scrape));
    }
}

#[test]
fn gie_lora_adds_upstreams_lora_affinity_score() {
    let e = engines(3);
    let lora = |running: &[&str], waiting: &[&str]| PodSignals {
        running_adapters: running.iter().map(ToString::to_string).collect(),
        waiting_adapters: waiting.iter().map(ToString::to_string).collect(),
        max_loras: Some(2),
        ..signals(0.0, 0.0)
    };
    let req = BenchRequest { adapter: Some("ad".into()), model: "ad".into(), ..request("x") };
    // Running it: 1.0; a free slot: 0.8; full with it waiting: 0.6. Pod 2 wins with it
    // running; without the scorer the three tie.
    let s = scrape_with(vec![lora(&["b"], &[]), lora(&["b", "c"], &["ad"]), lora(&["ad", "b"], &[])]);
    for seed in 0..8 {
        assert_eq!(pick(&mut GieDefault::with_lora_affinity(3, seed), &req, &e, &s, &[0; 3]), 2);
    }
    // Pod 0's free slot (0.8) beats pod 1's queued load (0.6) when neither runs it.
    let s = scrape_with(vec![lora(&["b"], &[]), lora(&["b", "c"], &["ad"]), lora(&["b", "c"], &[])]);
    for seed in 0..8 {
        assert_eq!(pick(&mut GieDefault::with_lora_affinity(3, seed), &req, &e, &s, &[0; 3]), 0);
    }
    let picks: Vec<usize> = (0..16).map(|seed| pick(&mut GieDefault::new(3, seed), &req, &e, &s, &[0; 3])).collect();
    assert!(picks.contains(&1) && picks.contains(&2), "the default profile has no LoRA score: {picks:?}");
}
