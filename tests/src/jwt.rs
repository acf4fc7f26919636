//! A test issuer of JSON Web Tokens: one HS256 key in a local JWKS file, the
//! `identity:` settings that make the gateway verify its tokens, and tokens signed with
//! it (or, for the refusals, with a key the gateway has never seen).

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use infergate_core::config::{IdentitySettings, IdentitySource, JwtSettings};
use serde_json::{Value, json};

/// The issuer every test token names.
pub const ISSUER: &str = "https://auth.infergate.test/";
/// The audience every test token names and the gateway requires.
pub const AUDIENCE: &str = "infergate";
/// The key of the JWKS the gateway is given.
pub const KEY: &[u8] = b"the identity tests' signing key, 32+ bytes long";
/// A key the gateway has never seen.
pub const UNKNOWN_KEY: &[u8] = b"a key the gateway has never seen, 32+ bytes";

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Writes the JWKS of [`KEY`] into `dir` and returns the settings of a required
/// identity taken from the verified token's `sub`.
pub fn required_identity(dir: &Path) -> IdentitySettings {
    let jwks = dir.join("jwks.json");
    let keys = json!({"keys": [{"kty": "oct", "alg": "HS256", "kid": "k1", "k": b64(KEY)}]});
    std::fs::write(&jwks, keys.to_string()).expect("the JWKS is written");
    IdentitySettings {
        source: IdentitySource::Jwt,
        header: None,
        jwt: Some(JwtSettings {
            issuer: ISSUER.into(),
            audiences: vec![AUDIENCE.into()],
            jwks_file: Some(jwks.display().to_string()),
            jwks_uri: None,
            claim: "sub".into(),
        }),
        required: true,
    }
}

pub fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The claims of a token for `sub` from `issuer`, expiring at `exp` (Unix seconds).
pub fn claims(sub: &str, issuer: &str, exp: u64) -> Value {
    json!({"iss": issuer, "sub": sub, "aud": AUDIENCE, "iat": now_s(), "exp": exp})
}

/// An HS256 token with these claims, signed with `key`.
pub fn token(key: &[u8], claims: &Value) -> String {
    let head = b64(json!({"alg": "HS256", "typ": "JWT", "kid": "k1"}).to_string().as_bytes());
    let signed = format!("{head}.{}", b64(claims.to_string().as_bytes()));
    let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key), signed.as_bytes());
    format!("{signed}.{}", b64(tag.as_ref()))
}

/// A valid token for `sub`, for an hour.
pub fn valid_token(sub: &str) -> String {
    token(KEY, &claims(sub, ISSUER, now_s() + 3600))
}
