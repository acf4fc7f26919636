//! The filters that establish who is asking, placed before the router (`identity:`):
//! first a header mutation that removes the client's copy of the identity header, so
//! that only a filter the operator trusts can set it; then, for a `jwt` identity,
//! Envoy's `jwt_authn`, which copies the configured claim of a verified token into that
//! header. `jwt_authn` never refuses a request itself (`allow_missing_or_failed`): the
//! router answers a request without an identity with an OpenAI-shaped 401 when one is
//! required, and serves it as the anonymous tenant otherwise.

use infergate_core::config::{IdentitySettings, IdentitySource, JwtSettings};
use infergate_core::wire::header::IDENTITY;
use serde_json::{Value, json};

/// The `jwt_authn` provider's name, and the cluster a remote JWKS is fetched through.
const PROVIDER: &str = "infergate";
pub(crate) const JWKS_CLUSTER: &str = "infergate-jwks";

/// The HTTP filters to place before the router, in order.
pub(crate) fn filters(identity: &IdentitySettings, tenant_header: &str) -> Vec<Value> {
    match (identity.source, &identity.jwt) {
        (IdentitySource::ClientHeader, _) => Vec::new(),
        (IdentitySource::TrustedHeader, _) => {
            vec![remove_client_copy(identity.header.as_deref().unwrap_or(tenant_header))]
        }
        (IdentitySource::Jwt, Some(jwt)) => vec![remove_client_copy(IDENTITY), jwt_authn(jwt)],
        // Refused by validation.
        (IdentitySource::Jwt, None) => Vec::new(),
    }
}

fn remove_client_copy(name: &str) -> Value {
    json!({
        "name": "infergate.identity.remove_client_copy",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
            "mutations": {"request_mutations": [{"remove": name}]},
        },
    })
}

fn jwt_authn(jwt: &JwtSettings) -> Value {
    let mut provider = json!({
        "issuer": jwt.issuer,
        "claim_to_headers": [{"header_name": IDENTITY, "claim_name": jwt.claim}],
        // The token goes on to the model server as it came.
        "forward": true,
    });
    if !jwt.audiences.is_empty() {
        provider["audiences"] = json!(jwt.audiences);
    }
    match (&jwt.jwks_file, &jwt.jwks_uri) {
        (Some(file), _) => provider["local_jwks"] = json!({"filename": file}),
        (None, Some(uri)) => {
            provider["remote_jwks"] = json!({
                "http_uri": {"uri": uri, "cluster": JWKS_CLUSTER, "timeout": "5s"},
                "cache_duration": "600s",
                "async_fetch": {"fast_listener": false},
                "retry_policy": {"num_retries": 3},
            });
        }
        (None, None) => {}
    }
    json!({
        "name": "envoy.filters.http.jwt_authn",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
            "providers": {PROVIDER: provider},
            // Verified when present; never refused here (the router answers in OpenAI's shape).
            "rules": [{"match": {"prefix": "/"}, "requires": {"allow_missing_or_failed": {}}}],
        },
    })
}

/// [`filters`] for gateway pods in a cluster, which do not have the operator's files: a
/// local JWKS is read now and written into the filter. The error names the file.
pub(crate) fn filters_for_cluster(identity: &IdentitySettings, tenant_header: &str) -> Result<Vec<Value>, String> {
    let mut filters = filters(identity, tenant_header);
    for filter in &mut filters {
        // `pointer_mut`, not indexing: indexing a JSON object adds the keys it lacks.
        let Some(local) = filter.pointer_mut(&format!("/typed_config/providers/{PROVIDER}/local_jwks")) else {
            continue;
        };
        let Some(path) = local["filename"].as_str().map(String::from) else { continue };
        let keys = std::fs::read_to_string(&path).map_err(|e| format!("identity.jwt.jwks_file {path}: {e}"))?;
        *local = json!({"inline_string": keys});
    }
    Ok(filters)
}

/// The cluster a remote JWKS is fetched through, if the identity needs one.
pub(crate) fn jwks_cluster(identity: &IdentitySettings) -> Option<Value> {
    let uri = identity.jwt.as_ref()?.jwks_uri.as_deref()?;
    let (tls, rest) = match uri.strip_prefix("https://") {
        Some(rest) => (true, rest),
        None => (false, uri.strip_prefix("http://")?),
    };
    let authority = rest.split('/').next()?;
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, port.parse::<u16>().ok()?),
        None => (authority, if tls { 443 } else { 80 }),
    };
    let mut cluster = json!({
        "name": JWKS_CLUSTER,
        "type": "STRICT_DNS",
        "connect_timeout": "5s",
        "load_assignment": {"cluster_name": JWKS_CLUSTER, "endpoints": [{"lb_endpoints": [{"endpoint": {"address":
            {"socket_address": {"address": host, "port_value": port}}}}]}]},
    });
    if tls {
        cluster["transport_socket"] = json!({
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "sni": host,
            },
        });
    }
    Some(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(file: Option<&str>, uri: Option<&str>) -> IdentitySettings {
        IdentitySettings {
            source: IdentitySource::Jwt,
            jwt: Some(JwtSettings {
                issuer: "https://auth.example.com/".into(),
                audiences: vec!["infergate".into()],
                jwks_file: file.map(Into::into),
                jwks_uri: uri.map(Into::into),
                claim: "tenant".into(),
            }),
            ..IdentitySettings::default()
        }
    }

    #[test]
    fn a_jwt_identity_removes_the_clients_copy_then_verifies() {
        let filters = filters(&jwt(Some("/etc/jwks.json"), None), "x-tenant-id");
        assert_eq!(filters.len(), 2);
        assert_eq!(filters[0]["typed_config"]["mutations"]["request_mutations"][0]["remove"], IDENTITY);
        let provider = &filters[1]["typed_config"]["providers"][PROVIDER];
        assert_eq!(provider["claim_to_headers"][0], json!({"header_name": IDENTITY, "claim_name": "tenant"}));
        assert_eq!(provider["local_jwks"]["filename"], "/etc/jwks.json");
        assert!(jwks_cluster(&jwt(Some("/etc/jwks.json"), None)).is_none());
    }

    #[test]
    fn in_a_cluster_a_local_jwks_is_written_into_the_filter() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        std::fs::write(&path, r#"{"keys":[]}"#).unwrap();
        let filters = filters_for_cluster(&jwt(path.to_str(), None), "x-tenant-id").unwrap();
        let local = &filters[1]["typed_config"]["providers"][PROVIDER]["local_jwks"];
        assert_eq!(local, &json!({"inline_string": r#"{"keys":[]}"#}));
        assert!(filters[0]["typed_config"].get("providers").is_none(), "the removal filter is left as it was");
        let missing = filters_for_cluster(&jwt(Some("/nonexistent/jwks.json"), None), "x-tenant-id").unwrap_err();
        assert!(missing.starts_with("identity.jwt.jwks_file /nonexistent/jwks.json: "), "{missing}");
    }

    #[test]
    fn a_remote_jwks_gets_a_cluster_of_its_own() {
        let identity = jwt(None, Some("https://auth.example.com:8443/keys"));
        let cluster = jwks_cluster(&identity).unwrap();
        assert_eq!(
            cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]["port_value"],
            8443
        );
        assert_eq!(cluster["transport_socket"]["typed_config"]["sni"], "auth.example.com");
    }

    #[test]
    fn a_client_header_identity_adds_no_filter_and_a_trusted_one_removes_the_clients_copy() {
        assert!(filters(&IdentitySettings::default(), "x-tenant-id").is_empty());
        let trusted = IdentitySettings { source: IdentitySource::TrustedHeader, ..IdentitySettings::default() };
        let filters = filters(&trusted, "x-tenant-id");
        assert_eq!(filters[0]["typed_config"]["mutations"]["request_mutations"][0]["remove"], "x-tenant-id");
    }
}
