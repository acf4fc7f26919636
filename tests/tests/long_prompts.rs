//! Long prompts end to end, in real Envoy: conversations of over 600 KiB (code, with
//! its escapes), hashed whole as their bodies stream through the filter. Each next turn
//! goes back to the pod that holds the conversation, and every pod receives the body
//! byte for byte.

use infergate_e2e::{Reply, Stack, StackSpec};
use infergate_model_sim::engine::EngineProfile;
use infergate_model_sim::server::api::BODY_DIGEST_HEADER;
use serde_json::{Value, json};

/// Bytes of each conversation's first message.
const HISTORY_BYTES: usize = 600 * 1024;

fn spec() -> StackSpec {
    StackSpec {
        max_body_bytes: 8 * 1024 * 1024,
        // Room for a 640k-token context, and prefill fast enough for a test.
        profile: EngineProfile { num_gpu_blocks: 40_000, prefill_tokens_per_s: 5_000_000.0, ..EngineProfile::TINY },
        ..StackSpec::default()
    }
}

/// About `bytes` of code-like text of its own, with the newlines, quotes and
/// backslashes that JSON escapes.
fn source(seed: u64, bytes: usize) -> String {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut out = String::with_capacity(bytes + 64);
    while out.len() < bytes {
        let name: String = (0..rng.usize(3..10)).map(|_| rng.lowercase()).collect();
        out.push_str(&format!("    let {name} = format!(\"{{}}\\\\n\", {});\n", rng.u32(..)));
    }
    out
}

async fn send(stack: &Stack, messages: &[Value]) -> (Reply, Vec<u8>) {
    let body = serde_json::to_vec(&json!({"model": "m", "max_tokens": 4, "messages": messages})).unwrap();
    let reply = stack.post("/v1/chat/completions", body.clone(), &[]).await;
    (reply, body)
}

/// The pod received exactly what was sent.
fn assert_unharmed(reply: &Reply, body: &[u8]) {
    assert_eq!(reply.status, 200, "{}", reply.body);
    let sent = format!("{:016x}", xxhash_rust::xxh64::xxh64(body, 0));
    assert_eq!(reply.header(BODY_DIGEST_HEADER), Some(sent.as_str()), "the body changed on its way");
}

/// The blocks the decision's chosen pod was believed to hold (`chosen=… prefix_blocks=N`).
fn chosen_prefix_blocks(reply: &Reply) -> usize {
    let decision = reply.header("x-infergate-decision").unwrap_or_default();
    let chosen = decision.split("; chosen=").nth(1).unwrap_or_default();
    let field = chosen.split(" prefix_blocks=").nth(1).unwrap_or_default();
    field.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_conversation_goes_back_to_the_pod_that_holds_it() {
    let stack = Stack::start(spec()).await;
    for conversation in 0..3u64 {
        let history = vec![
            json!({"role": "system", "content": source(conversation, HISTORY_BYTES)}),
            json!({"role": "user", "content": "Where is the bug?"}),
        ];
        let (first, body) = send(&stack, &history).await;
        assert!(body.len() > 512 * 1024, "{} bytes", body.len());
        assert_unharmed(&first, &body);
        let pod = first.served_by().expect("the pod names itself").to_string();
        let answer = first.json()["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_string();
        let mut next = history.clone();
        next.push(json!({"role": "assistant", "content": answer}));
        next.push(json!({"role": "user", "content": "And how would you fix it?"}));
        let (second, body) = send(&stack, &next).await;
        assert_unharmed(&second, &body);
        assert_eq!(second.served_by(), Some(pod.as_str()), "turn 2 of conversation {conversation} left its pod");
        // The whole history is matched, not a first window of it: 600 KiB is 9,600
        // blocks of 64 bytes, and the last key before its end is within 1.6% of it.
        let matched = chosen_prefix_blocks(&second);
        assert!(matched >= 9_400, "conversation {conversation}: {matched} blocks matched");
    }
}
