use infergate_core::config::{IdentitySettings, IdentitySource, JwtSettings};
use infergate_core::wire::{cluster, header, path};

use crate::host::events::Flow;
use crate::host::fake::{FakeEnvoy, Stream, Worker, take_logs};
use crate::test_support::{
    MODEL, TOKEN, TOKEN_ENV, VM_ID, chat, control_config, global_config, global_router_config, push, summary,
};

/// A global router: one control worker and `workers` global workers.
struct Global {
    envoy: FakeEnvoy,
    control: Worker,
    workers: Vec<Worker>,
}

impl Global {
    fn new(workers: usize, rate_limits: bool) -> Self {
        let envoy = FakeEnvoy::new();
        envoy.set_env(TOKEN_ENV, TOKEN);
        let mut config = global_router_config();
        if !rate_limits {
            config.rate_limits = None;
        }
        let control = envoy.start(VM_ID, &control_config());
        let workers = (0..workers).map(|_| envoy.start(VM_ID, &global_config(config.clone()))).collect();
        Self { envoy, control, workers }
    }

    fn store(&self, bytes: &[u8]) -> u32 {
        push(&self.control, path::SUMMARY, bytes).reply().map_or(0, |r| r.status)
    }

    fn route(&self, worker: usize, headers: &[(&str, &str)]) -> Stream {
        let mut stream = self.workers[worker].stream();
        stream.post_json("/v1/chat/completions", headers, &chat("hello"));
        stream
    }
}

/// `east`'s predicted TTFT in a decision's explanation (`east(ttft=71ms,...`).
fn east_ttft(stream: &mut Stream) -> u64 {
    stream.respond_headers("127.0.0.1:8080", 200, "text/event-stream", false);
    let decision = stream.response_header(header::DECISION).unwrap_or_default().to_string();
    let after = decision.split("east(ttft=").nth(1).unwrap_or_default();
    after.split("ms").next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no east ttft in {decision}"))
}

#[test]
fn clusters_are_named_best_first_from_their_summaries() {
    let global = Global::new(1, false);
    let now = global.envoy.now_ms();
    assert_eq!(global.store(&summary("east", 1, now, 50.0)), 204);
    assert_eq!(global.store(&summary("west", 1, now, 900.0)), 204);
    let stream = global.route(0, &[]);
    // Only east meets the 500 ms target, so it goes first; west is the fallback.
    assert_eq!(stream.request_header(header::ENDPOINT), Some("127.0.0.1:8080,127.0.0.1:8081"));
    assert_eq!(stream.request_header(header::MODEL), Some(MODEL));
    assert_eq!(global.envoy.stat("infergate.global.decisions"), 1);
    assert_eq!(global.envoy.stat("infergate.global.cluster.east.chosen"), 1);
    assert_eq!(global.envoy.stat("infergate.global.blind"), 0);
}

#[test]
fn without_summaries_the_decision_is_blind_and_counted() {
    let global = Global::new(1, false);
    let stream = global.route(0, &[]);
    assert!(stream.request_header(header::ENDPOINT).is_some() || stream.reply().is_some());
    assert_eq!(global.envoy.stat("infergate.global.blind") + global.envoy.stat("infergate.global.rejected"), 1);
}

/// Regression (8414a6d): the backlog sent since a cluster's summary was counted per
/// worker, so a burst spread over the workers raised each one's prediction by half.
#[test]
fn the_backlog_since_a_summary_is_counted_across_the_workers() {
    let global = Global::new(2, false);
    let now = global.envoy.now_ms();
    // West has no summary: every request goes to east.
    assert_eq!(global.store(&summary("east", 1, now, 50.0)), 204);
    // None answers before the last is routed: an answer leaves the backlog.
    let mut streams: Vec<Stream> = (0..4).map(|i| global.route(i % 2, &[])).collect();
    let predictions: Vec<u64> = streams.iter_mut().map(east_ttft).collect();
    assert!(predictions.windows(2).all(|w| w[1] > w[0]), "each request raises east's prediction: {predictions:?}");
    // Answers leave the backlog; a newer summary resets it.
    assert_eq!(global.store(&summary("east", 2, now, 50.0)), 204);
    assert_eq!(east_ttft(&mut global.route(0, &[])), predictions[0]);
}

#[test]
fn a_bad_class_header_is_refused() {
    let global = Global::new(1, false);
    let stream = global.route(0, &[("x-infergate-class", "urgent")]);
    let reply = stream.reply().map(|r| (r.status, r.json()["error"]["code"].clone()));
    assert_eq!(reply, Some((400, "invalid_class".into())));
    assert_eq!(global.envoy.stat("infergate.global.rejected"), 1);
}

#[test]
fn models_are_listed_from_fresh_summaries_only() {
    let global = Global::new(1, false);
    let now = global.envoy.now_ms();
    assert_eq!(global.store(&summary("east", 1, now, 50.0)), 204);
    let mut list = global.workers[0].stream();
    list.request("GET", "/v1/models", &[], &[]);
    let models = list.reply().map(|r| r.json()).unwrap_or_default();
    assert_eq!(models["data"][0]["id"], MODEL, "{models}");
    global.envoy.advance_ms(10_000);
    let mut stale = global.workers[0].stream();
    stale.request("GET", "/v1/models", &[], &[]);
    let models = stale.reply().map(|r| r.json()).unwrap_or_default();
    assert_eq!(models["data"].as_array().map(Vec::len), Some(0), "{models}");
}

#[test]
fn usage_is_metered_and_reported_in_batches_with_the_token() {
    let global = Global::new(1, true);
    let now = global.envoy.now_ms();
    assert_eq!(global.store(&summary("east", 1, now, 50.0)), 204);
    let mut stream = global.route(0, &[("authorization", "Bearer tenant-a")]);
    let tenant = stream.request_header(header::TENANT).unwrap_or_default().to_string();
    assert!(!tenant.is_empty() && !tenant.contains("tenant-a"), "the tenant is hashed: {tenant}");
    let charged: u64 = stream.request_header(header::PROMPT_TOKENS).and_then(|t| t.parse().ok()).unwrap_or(0);
    assert!(charged > 0);
    stream.respond_headers("127.0.0.1:8080", 200, "application/json", false);
    assert_eq!(stream.respond_chunk(br#"{"usage": {"prompt_tokens": 4, "#, false), Flow::Pause);
    assert_eq!(stream.respond_chunk(br#""completion_tokens": 9, "total_tokens": 11}}"#, true), Flow::Continue);
    assert!(global.envoy.http_calls().is_empty(), "reports wait for the tick");
    global.envoy.advance_ms(200);
    let calls = global.envoy.http_calls();
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(call.cluster, cluster::USAGE);
    assert!(call.headers.contains(&(":path".to_string(), path::USAGE.to_string())));
    assert!(call.headers.contains(&("authorization".to_string(), format!("Bearer {TOKEN}"))));
    let reports: serde_json::Value = serde_json::from_slice(&call.body).unwrap_or_default();
    assert_eq!(reports[0]["tenant"], tenant.as_str());
    assert_eq!((reports[0]["charged_tokens"].as_u64(), reports[0]["used_tokens"].as_u64()), (Some(charged), Some(11)));
}

#[test]
fn reports_the_rate_limit_service_refused_are_kept_for_the_next_tick() {
    let global = Global::new(1, true);
    assert_eq!(global.store(&summary("east", 1, global.envoy.now_ms(), 50.0)), 204);
    let mut stream = global.route(0, &[]);
    stream.respond_headers("127.0.0.1:8080", 200, "text/event-stream", false);
    stream.respond_chunk(b"data: {\"usage\": {\"total_tokens\": 5}}\n\ndata: [DONE]\n\n", true);
    global.envoy.fail("dispatch_http_call");
    take_logs();
    global.envoy.advance_ms(200);
    assert!(take_logs().iter().any(|l| l.contains("cannot send 1 usage reports")));
    global.envoy.heal("dispatch_http_call");
    global.envoy.advance_ms(200);
    assert_eq!(global.envoy.http_calls().len(), 1);
}

#[test]
fn a_summary_for_another_cluster_name_does_not_count() {
    let global = Global::new(1, false);
    let now = global.envoy.now_ms();
    assert_eq!(global.store(&summary("north", 1, now, 10.0)), 204);
    let mut stream = global.route(0, &[]);
    stream.respond_headers("127.0.0.1:8080", 200, "application/json", false);
    let decision = stream.response_header(header::DECISION).unwrap_or_default().to_string();
    assert!(!decision.contains("north") && decision.contains("no-summary"), "{decision}");
}

/// A global router whose tenant is the verified identity `jwt_authn` writes.
fn with_verified_identity(required: bool) -> Global {
    let envoy = FakeEnvoy::new();
    envoy.set_env(TOKEN_ENV, TOKEN);
    let mut config = global_router_config();
    config.identity = IdentitySettings {
        source: IdentitySource::Jwt,
        jwt: Some(JwtSettings {
            issuer: "https://auth.example.com/".into(),
            audiences: vec![],
            jwks_file: Some("/etc/jwks.json".into()),
            jwks_uri: None,
            claim: "sub".into(),
        }),
        required,
        header: None,
    };
    let control = envoy.start(VM_ID, &control_config());
    let workers = vec![envoy.start(VM_ID, &global_config(config))];
    Global { envoy, control, workers }
}

#[test]
fn with_a_verified_identity_rotating_api_keys_stay_one_tenant_for_the_limits() {
    let global = with_verified_identity(true);
    let now = global.envoy.now_ms();
    assert_eq!(global.store(&summary("east", 1, now, 50.0)), 204);
    let tenants: Vec<Option<String>> = ["Bearer made-up-1", "Bearer made-up-2", "Bearer made-up-3"]
        .iter()
        .map(|key| {
            let stream = global.route(0, &[("authorization", key), (header::IDENTITY, "acme")]);
            stream.request_header(header::TENANT).map(str::to_string)
        })
        .collect();
    assert!(tenants[0].is_some(), "no tenant set: {tenants:?}");
    assert!(tenants.iter().all(|t| *t == tenants[0]), "{tenants:?}");
    // A key alone, without the identity jwt_authn writes, is refused.
    let stream = global.route(0, &[("authorization", "Bearer made-up-4")]);
    assert_eq!(stream.reply().map(|r| r.status), Some(401));
}
