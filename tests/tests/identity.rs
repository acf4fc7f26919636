//! Who is asking, in real Envoy: with a `jwt` identity the rendered config removes the
//! client's `x-infergate-identity`, Envoy's `jwt_authn` copies the `sub` of a token it
//! verified against a local JWKS into it, and the router reads the tenant from there.
//! A request without a verified token (none, expired, signed by an unknown key, of
//! another issuer, or a forged identity header) is refused with an OpenAI-shaped 401.

use infergate_core::wire::header;
use infergate_e2e::jwt::{ISSUER, KEY, UNKNOWN_KEY, claims, now_s, required_identity, token};
use infergate_e2e::{Stack, StackSpec, chat_body};

async fn jwt_stack(dir: &tempfile::TempDir) -> Stack {
    Stack::start(StackSpec { identity: required_identity(dir.path()), ..StackSpec::default() }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_verified_token_names_the_tenant_and_the_rest_get_401() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let stack = jwt_stack(&dir).await;
    let body = chat_body("m", "Hello there", 1).to_string();
    let bearer = |token: &str| format!("Bearer {token}");

    let acme = token(KEY, &claims("acme", ISSUER, now_s() + 3600));
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
        ("an expired token", vec![("authorization", bearer(&token(KEY, &claims("acme", ISSUER, now_s() - 600))))]),
        (
            "an unknown key",
            vec![("authorization", bearer(&token(UNKNOWN_KEY, &claims("acme", ISSUER, now_s() + 3600))))],
        ),
        (
            "another issuer",
            vec![("authorization", bearer(&token(KEY, &claims("acme", "https://evil.test/", now_s() + 3600))))],
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
