//! Tier 2's global rate limits end to end: two global router replicas, each with its
//! own `infergate-ratelimit`, both counting in one Redis, in front of a tier-1 stack;
//! with a verified identity, a tenant that rotates its tokens is still one tenant.

use std::time::Duration;

use infergate_core::config::IdentitySettings;
use infergate_core::global::metering::{answer_tokens, stream_chunk_tokens, tenant_id};
use infergate_core::request::parse_request;
use infergate_e2e::global_router::{ClusterSpec, GlobalRouter, Process, rate_limits, start_redis};
use infergate_e2e::jwt::{ISSUER, KEY, claims, now_s, required_identity, token, valid_token};
use infergate_e2e::{Reply, Stack, StackSpec, chat_body};
use infergate_ratelimit::charge::{Kind, counter_key};
use serde_json::{Value, json};

/// Fixed windows reset at each minute: start a test early in one.
async fn at_the_start_of_a_minute() {
    let second = infergate_ratelimit::service::unix_s() % 60;
    if second > 40 {
        tokio::time::sleep(Duration::from_secs(61 - second)).await;
    }
}

struct Limited {
    _stack: Stack,
    replicas: Vec<GlobalRouter>,
    _services: Vec<Process>,
    redis_port: u16,
    _redis: Process,
}

async fn limited(tokens_per_minute: u64) -> Limited {
    limited_as(tokens_per_minute, IdentitySettings::default()).await
}

async fn limited_as(tokens_per_minute: u64, identity: IdentitySettings) -> Limited {
    let (redis, redis_port) = start_redis().await;
    let mut stack = Stack::start(StackSpec { start_agent: false, ..StackSpec::default() }).await;
    let cluster =
        || (ClusterSpec { name: "east", region: "us-east", cost_per_million_tokens: 0.5 }, stack.config.gateway.listen);
    let mut replicas = Vec::new();
    let mut services = Vec::new();
    for _ in 0..2 {
        let limits = rate_limits(redis_port, 10_000, tokens_per_minute);
        let replica = GlobalRouter::start_with("us-east", &[cluster()], 2_000, Some(limits), identity.clone()).await;
        services.push(replica.start_rate_limit_service().await);
        replicas.push(replica);
    }
    let (first, second) = replicas.split_at(1);
    first[0].attach_with_more(&mut stack, "east", &second[0]).await;
    Limited { _stack: stack, replicas, _services: services, redis_port, _redis: redis }
}

fn long_prompt(body_tokens: usize) -> Value {
    chat_body("m", &"word ".repeat(body_tokens * 4 / 5), 1)
}

fn redis_get(port: u16, key: &str) -> i64 {
    let output = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "GET", key])
        .output()
        .expect("redis-cli comes with redis-server");
    String::from_utf8_lossy(&output.stdout).trim().parse().unwrap_or(0)
}

/// Sends ~200-token requests, alternating replicas, with the `authorization` value
/// `authorization(i)` gives the i-th, until one is refused with a 429: how many were
/// served before, and the refusal.
async fn until_refused(limited: &Limited, authorization: impl Fn(u64) -> String) -> (usize, Reply) {
    let mut served = 0;
    for i in 0..40u64 {
        let value = authorization(i);
        let replica = &limited.replicas[(i % 2) as usize];
        let reply = replica.post(&long_prompt(200), &[("authorization", value.as_str())]).await;
        match reply.status {
            200 => served += 1,
            429 => return (served, reply),
            status => panic!("unexpected {status}: {}", reply.body),
        }
    }
    panic!("the tenant never reached its limit in 40 requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_over_its_tokens_per_minute_gets_429_on_every_replica_and_others_are_served() {
    at_the_start_of_a_minute().await;
    let limited = limited(2_000).await;
    let over = [("authorization", "Bearer sk-tenant-a")];
    let under = [("authorization", "Bearer sk-tenant-b")];
    let (served, refused) = until_refused(&limited, |_| over[0].1.to_string()).await;
    // About 200 tokens per request against 2,000 per minute, counted across both replicas.
    assert!((8..=11).contains(&served), "{served} requests were served before the limit");
    assert_eq!(refused.error_code(), "rate_limit_exceeded", "{}", refused.body);
    assert_eq!(refused.json()["error"]["type"], "rate_limit_error");
    let retry_after: u32 = refused.header("retry-after").unwrap_or_default().parse().unwrap_or(0);
    assert!((1..=60).contains(&retry_after), "Retry-After: {retry_after}");

    for replica in &limited.replicas {
        let reply = replica.post(&long_prompt(200), &over).await;
        assert_eq!(reply.status, 429, "a replica let the tenant over its limit through: {}", reply.body);
        let other = replica.post(&long_prompt(200), &under).await;
        assert_eq!(other.status, 200, "another tenant was refused: {}", other.body);
    }
}

/// With identity from a verified JWT, tier 2 limits the tenant the token names: a
/// client that sends a new token with every request (each one valid, for the same
/// tenant) is limited as one tenant, a made-up key is refused, and another tenant is
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_tokens_do_not_escape_the_limit_of_the_verified_tenant() {
    at_the_start_of_a_minute().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let limited = limited_as(2_000, required_identity(dir.path())).await;
    // A different token each time: the same tenant, a different expiry.
    let rotating = |i: u64| format!("Bearer {}", token(KEY, &claims("acme", ISSUER, now_s() + 600 + i)));
    let (served, refused) = until_refused(&limited, rotating).await;
    assert!((8..=11).contains(&served), "{served} requests were served before the limit");
    assert_eq!(refused.error_code(), "rate_limit_exceeded", "{}", refused.body);
    let made_up = limited.replicas[0].post(&long_prompt(200), &[("authorization", "Bearer sk-made-up-1")]).await;
    assert_eq!(made_up.status, 401, "a key that is no token: {}", made_up.body);
    let other = format!("Bearer {}", valid_token("globex"));
    let reply = limited.replicas[1].post(&long_prompt(200), &[("authorization", &other)]).await;
    assert_eq!(reply.status, 200, "another tenant was refused: {}", reply.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admission_estimate_is_corrected_by_the_answers_usage_streamed_or_not() {
    at_the_start_of_a_minute().await;
    let limited = limited(1_000_000).await;
    let window = infergate_ratelimit::service::unix_s() / 60;
    for (key, streamed) in [("Bearer sk-whole", false), ("Bearer sk-streamed", true)] {
        let mut body = chat_body("m", &"word ".repeat(80), 50);
        if streamed {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        let charged = parse_request(body.to_string().as_bytes(), &Default::default()).unwrap().prompt_tokens();
        let reply = limited.replicas[0].post(&body, &[("authorization", key)]).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let used =
            if streamed { stream_chunk_tokens(reply.body.as_bytes()) } else { answer_tokens(reply.body.as_bytes()) }
                .expect("the simulator reports usage");
        assert!(used > u64::from(charged), "used {used}, charged {charged}: the test needs them to differ");
        // Admission charged the estimate; within a few flushes (200 ms each) the
        // answer's usage replaces it: the counter ends at what the answer used.
        let counter = counter_key(Kind::Tokens, &tenant_id(Some(key)), "m", window);
        let mut counted = 0;
        for _ in 0..50 {
            counted = redis_get(limited.redis_port, &counter);
            if counted == i64::try_from(used).unwrap() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let kind = if streamed { "streamed" } else { "whole" };
        assert_eq!(
            counted,
            i64::try_from(used).unwrap(),
            "the {kind} answer used {used} tokens; {charged} were charged"
        );
    }
}
