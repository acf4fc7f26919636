//! Routing before the body ends, in real Envoy: a long body that names its model first
//! is routed once its hashed prompt bytes are in, while the client is still sending,
//! and its rest streams to the pod; a body found invalid after the decision is
//! answered with a 400 by the gateway; with the switch off, the decision waits.

use std::time::{Duration, Instant};

use infergate_e2e::upload::Upload;
use infergate_e2e::{Stack, StackSpec};

/// Hashing reads the first 8 KiB of a prompt here (128 blocks of 64 bytes), so that a
/// body three times as long fits the simulated engine's 8,192-token context.
const FIRST_PART: usize = 14 * 1024;

fn spec(early_decision: bool) -> StackSpec {
    let mut spec = StackSpec { early_decision, ..StackSpec::default() };
    spec.routing.prefix.max_blocks = 128;
    spec
}

/// A chat body of about 28 KiB with `model` first and `tail` before its last brace.
fn long_body(seed: &str, tail: &str) -> Vec<u8> {
    let prompt = format!("{seed} ").repeat(28 * 1024 / (seed.len() + 1));
    format!(r#"{{"model":"m","max_tokens":1,"messages":[{{"role":"user","content":"{prompt}"}}]{tail}}}"#).into_bytes()
}

async fn stat(stack: &Stack, name: &str) -> u64 {
    stack.stat(name).await.unwrap_or(0)
}

/// Waits up to `within` for a counter to reach `at_least`.
async fn counter_reaches(stack: &Stack, name: &str, at_least: u64, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if stat(stack, name).await >= at_least {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

async fn decisions(stack: &Stack) -> u64 {
    let mut total = 0;
    for basis in ["signals", "mixed", "load_only"] {
        total += stat(stack, &format!("infergate.decisions.{basis}")).await;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_decision_in_real_envoy() {
    let stack = Stack::start(spec(true)).await;

    // Routed while the client still holds back the last 14 KiB; the rest streams on
    // and the pod answers the complete request.
    let body = long_body("early", "");
    let upload = Upload::start(stack.config.gateway.listen, &body, FIRST_PART).await;
    assert!(
        counter_reaches(&stack, "infergate.requests.routed_early", 1, Duration::from_secs(5)).await,
        "no decision before the body ended"
    );
    assert_eq!(decisions(&stack).await, 1);
    let (status, answer) = upload.finish().await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("chat.completion"), "{answer}");
    assert_eq!(stat(&stack, "infergate.requests.early.refused").await, 0);
    assert_eq!(stat(&stack, "infergate.requests.full_parses").await, 0);

    // Invalid after the decision: a second `model` in the part sent last. The gateway
    // answers 400 itself; the pod never gets a complete body.
    let body = long_body("twice", r#","model":"other""#);
    let upload = Upload::start(stack.config.gateway.listen, &body, FIRST_PART).await;
    assert!(counter_reaches(&stack, "infergate.requests.routed_early", 2, Duration::from_secs(5)).await);
    let (status, answer) = upload.finish().await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("the key 'model' twice"), "{answer}");
    assert_eq!(stat(&stack, "infergate.requests.early.refused").await, 1);

    // A JSON error in the rest, then the gateway still serves.
    let body = long_body("broken", ",]");
    let upload = Upload::start(stack.config.gateway.listen, &body, FIRST_PART).await;
    assert!(counter_reaches(&stack, "infergate.requests.routed_early", 3, Duration::from_secs(5)).await);
    let (status, answer) = upload.finish().await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("not valid JSON"), "{answer}");
    assert_eq!(stat(&stack, "infergate.requests.early.refused").await, 2);
    let upload = Upload::start(stack.config.gateway.listen, &long_body("after", ""), 1024).await;
    assert_eq!(upload.finish().await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_early_decision_off_the_decision_waits_for_the_whole_body() {
    let stack = Stack::start(spec(false)).await;
    let upload = Upload::start(stack.config.gateway.listen, &long_body("late", ""), FIRST_PART).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(decisions(&stack).await, 0, "decided before the body ended");
    let (status, answer) = upload.finish().await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(decisions(&stack).await, 1);
    assert_eq!(stat(&stack, "infergate.requests.routed_early").await, 0);
}
