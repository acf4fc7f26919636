//! The official OpenAI Python SDK against the gateway in real Envoy: chat, a stream
//! with usage, a text completion, a tools request, the model list, and the gateway's
//! refusals as the SDK's typed errors (`tests/sdk/openai_sdk_checks.py`). Once on the
//! plain stack, once on a stack whose identity is a required JWT, where the SDK's API
//! key is the token and a request without one raises `AuthenticationError`.
//! `tests/tests/real_engines.rs` runs the same script against real vLLM pods.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use infergate_core::config::{IdentitySettings, IdentitySource, JwtSettings};
use infergate_e2e::{Stack, StackSpec};
use serde_json::json;

#[path = "../sdk/runner.rs"]
mod sdk;
use sdk::run_openai_sdk_checks;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_gets_what_it_expects_from_the_gateway() {
    let stack = Stack::start(StackSpec::default()).await;
    run_openai_sdk_checks(&stack.gateway_url, "m", &["--tools", "text"]).await;
}

const ISSUER: &str = "https://auth.infergate.test/";
const KEY: &[u8] = b"the SDK checks' signing key, 32+ bytes long";

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// An HS256 token for tenant `acme`, valid for an hour, signed with [`KEY`].
fn token() -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let claims = json!({"iss": ISSUER, "sub": "acme", "aud": "infergate", "iat": now, "exp": now + 3600});
    let head = b64(json!({"alg": "HS256", "typ": "JWT", "kid": "k1"}).to_string().as_bytes());
    let signed = format!("{head}.{}", b64(claims.to_string().as_bytes()));
    let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, KEY), signed.as_bytes());
    format!("{signed}.{}", b64(tag.as_ref()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_required_identity_the_sdk_key_is_the_token_and_none_is_an_authentication_error() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let jwks = dir.path().join("jwks.json");
    let keys = json!({"keys": [{"kty": "oct", "alg": "HS256", "kid": "k1", "k": b64(KEY)}]});
    std::fs::write(&jwks, keys.to_string()).expect("the JWKS is written");
    let identity = IdentitySettings {
        source: IdentitySource::Jwt,
        header: None,
        jwt: Some(JwtSettings {
            issuer: ISSUER.into(),
            audiences: vec!["infergate".into()],
            jwks_file: Some(jwks.display().to_string()),
            jwks_uri: None,
            claim: "sub".into(),
        }),
        required: true,
    };
    let stack = Stack::start(StackSpec { identity, ..StackSpec::default() }).await;
    let token = token();
    run_openai_sdk_checks(&stack.gateway_url, "m", &["--tools", "text", "--identity-required", "--api-key", &token])
        .await;
}
