//! The tenant comes from the configured source, read before the gateway's own headers
//! are stripped; a request without one is refused with an OpenAI-shaped 401 when an
//! identity is required.

use infergate_core::config::TenantSource;
use infergate_core::wire::header;

use crate::test_support::{Gateway, chat, idle, router_config_full, routing, snapshot};

fn gateway(required: bool) -> Gateway {
    let tenant = TenantSource { header: header::IDENTITY.to_string(), verified: true, required };
    let gateway = Gateway::with_router_config(1, &router_config_full(routing(), false, true, Some(tenant)));
    assert_eq!(gateway.push_snapshot(&snapshot(1, gateway.envoy.now_ms(), &[idle(), idle(), idle()])), 204);
    gateway
}

fn send(gateway: &Gateway, headers: &[(&str, &str)]) -> crate::host::fake::Stream {
    let mut stream = gateway.routers[0].stream();
    let body = serde_json::to_vec(&chat("hello")).unwrap_or_default();
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    stream.request("POST", "/v1/chat/completions", &all, &[body.as_slice()]);
    stream
}

#[test]
fn a_request_without_an_identity_is_refused_with_401_when_one_is_required() {
    let gateway = gateway(true);
    for headers in [vec![], vec![("x-tenant-id", "acme")], vec![(header::IDENTITY, "  ")]] {
        let stream = send(&gateway, &headers);
        let reply = stream.reply().unwrap_or_else(|| panic!("{headers:?} was routed"));
        assert_eq!(reply.status, 401, "{headers:?}");
        let error = reply.json();
        assert_eq!(error["error"]["code"], "invalid_api_key", "{error}");
        assert!(stream.request_header(header::ENDPOINT).is_none());
    }
    let stream = send(&gateway, &[(header::IDENTITY, "acme")]);
    assert!(stream.reply().is_none(), "refused: {:?}", stream.reply().map(|r| r.json()));
    assert!(stream.request_header(header::ENDPOINT).is_some());
    // Read, then removed like every gateway header: the pod never sees it.
    assert!(stream.request_header(header::IDENTITY).is_none());
}

#[test]
fn without_the_requirement_a_request_without_identity_is_served_anonymously() {
    let gateway = gateway(false);
    let stream = send(&gateway, &[]);
    assert!(stream.reply().is_none());
    assert!(stream.request_header(header::ENDPOINT).is_some());
}
