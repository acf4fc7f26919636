//! The official OpenAI Python SDK against the gateway in real Envoy: chat, a stream
//! with usage, a text completion, a tools request, the model list, and the gateway's
//! refusals as the SDK's typed errors (`tests/sdk/openai_sdk_checks.py`). Once on the
//! plain stack, once on a stack whose identity is a required JWT, where the SDK's API
//! key is the token and a request without one raises `AuthenticationError`.
//! `tests/tests/real_engines.rs` runs the same script against real vLLM pods.

use infergate_e2e::jwt::{required_identity, valid_token};
use infergate_e2e::{Stack, StackSpec};

#[path = "../sdk/runner.rs"]
mod sdk;
use sdk::run_openai_sdk_checks;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_gets_what_it_expects_from_the_gateway() {
    let stack = Stack::start(StackSpec::default()).await;
    run_openai_sdk_checks(&stack.gateway_url, "m", &["--tools", "text"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_required_identity_the_sdk_key_is_the_token_and_none_is_an_authentication_error() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let identity = required_identity(dir.path());
    let stack = Stack::start(StackSpec { identity, ..StackSpec::default() }).await;
    let token = valid_token("acme");
    run_openai_sdk_checks(&stack.gateway_url, "m", &["--tools", "text", "--identity-required", "--api-key", &token])
        .await;
}
