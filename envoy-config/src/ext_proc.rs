//! The gateway with `infergate-epp` as its endpoint picker instead of the filter: the
//! ext_proc HTTP filter in the endpoint picker protocol's streaming mode, and the
//! picker's gRPC cluster. The pools' clusters and routes are the filter's: the picker
//! sets the same routing headers and clears the route cache.

use std::net::SocketAddr;

use infergate_core::wire::cluster::EPP as EPP_CLUSTER;
use infergate_core::wire::epp;
use serde_json::{Value, json};

use crate::clusters::grpc_cluster;

/// The ext_proc filter: request headers and the whole request body streamed both ways
/// (`FULL_DUPLEX_STREAMED`, which needs request trailers sent too), the response
/// headers, and the endpoint the proxy served from forwarded in `envoy.lb`.
pub(crate) fn filter() -> Value {
    json!({
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": EPP_CLUSTER}, "timeout": "10s"},
            // A picker that is down fails requests instead of sending them unrouted.
            "failure_mode_allow": false,
            // A long upload waits for the picker no longer than a whole request may take.
            "message_timeout": "300s",
            "processing_mode": {
                "request_header_mode": "SEND",
                "response_header_mode": "SEND",
                "request_body_mode": "FULL_DUPLEX_STREAMED",
                "response_body_mode": "NONE",
                "request_trailer_mode": "SEND",
                "response_trailer_mode": "SKIP",
            },
            "metadata_options": {"forwarding_namespaces": {"untyped": [epp::LB_NAMESPACE]}},
        },
    })
}

/// The picker's cluster, HTTP/2 to `address`.
pub(crate) fn cluster(address: SocketAddr) -> Value {
    grpc_cluster(EPP_CLUSTER, address)
}
