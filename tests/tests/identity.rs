//! Who is asking, in real Envoy: with a `jwt` identity the rendered config removes the
//! client's `x-infergate-identity`, Envoy's `jwt_authn` copies the `sub` of a token it
//! verified against a local JWKS into it, and the router reads the tenant from there.
//! A request without a verified token (none, expired, signed by an unknown key, of
//! another issuer, or a forged identity header) is refused with an OpenAI-shaped 401.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use infergate_core::config::{IdentitySettings, IdentitySource, JwtSettings};
use infergate_core::wire::header;
use infergate_e2e::{Stack, StackSpec, chat_body};
use serde_json::json;

const ISSUER: &str = "https://auth.infergate.test/";
const KEY: &[u8] = b"the identity tests' signing key, 32+ bytes long";
const OTHER_KEY: &[u8] = b"a key the gateway has never seen, 32+ bytes";

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// An HS256 token with these claims, signed with `key`.
fn token(key: &[u8], claims: serde_json::Value) -> String {
    let head = b64(json!({"alg": "HS256", "typ": "JWT", "kid": "k1"}).to_string().as_bytes());
    let body = b64(claims.to_string().as_bytes());
    let signed = format!("{head}.{body}");
    let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key), signed.as_bytes());
    format!("{signed}.{}", b64(tag.as_ref()))
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn claims(sub: &str, issuer: &str, exp: u64) -> serde_json::Value {
    json!({"iss": issuer, "sub": sub, "aud": "infergate", "iat": now_s(), "exp": exp})
}

async fn jwt_stack(dir: &tempfile::TempDir) -> Stack {
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
    Stack::start(StackSpec { identity, ..StackSpec::default() }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_verified_token_names_the_tenant_and_the_rest_get_401() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let stack = jwt_stack(&dir).await;
    let body = chat_body("m", "Hello there", 1).to_string();
    let bearer = |token: &str| format!("Bearer {token}");

    let acme = token(KEY, claims("acme", ISSUER, now_s() + 3600));
    let reply = stack.post("/v1/chat/completions", body.clone(), &[("authorization", &bearer(&acme))]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let decision = reply.header(header::DECISION).unwrap_or_default().to_string();
    assert!(decision.ends_with("; tenant=acme"), "{decision}");

    // A valid token wins over whatever the client claims in the headers.
    let forged = [
        ("authorization", bearer(&acme)),
        (header::IDENTITY, "globex".to_string()),
        ("x-tenant-id", "globex".to_string()),
    ];
    let forged: Vec<(&str, &str)> = forged.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let reply = stack.post("/v1/chat/completions", body.clone(), &forged).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.header(header::DECISION).unwrap_or_default().ends_with("; tenant=acme"));

    let refused = [
        ("no token", vec![]),
        ("a forged identity header alone", vec![(header::IDENTITY, "acme".to_string())]),
        ("an expired token", vec![("authorization", bearer(&token(KEY, claims("acme", ISSUER, now_s() - 600))))]),
        ("an unknown key", vec![("authorization", bearer(&token(OTHER_KEY, claims("acme", ISSUER, now_s() + 3600))))]),
        (
            "another issuer",
            vec![("authorization", bearer(&token(KEY, claims("acme", "https://evil.test/", now_s() + 3600))))],
        ),
        ("a malformed token", vec![("authorization", "Bearer not.a.token".to_string())]),
    ];
    for (what, headers) in refused {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let reply = stack.post("/v1/chat/completions", body.clone(), &headers).await;
        assert_eq!(reply.status, 401, "{what}: {}", reply.body);
        assert_eq!(reply.error_code(), "invalid_api_key", "{what}: {}", reply.body);
        assert!(reply.served_by().is_none(), "{what} reached a pod");
    }
    // The gateway still serves after every refusal.
    let reply = stack.post("/v1/chat/completions", body, &[("authorization", &bearer(&acme))]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}
