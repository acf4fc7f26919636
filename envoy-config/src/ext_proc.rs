//! The gateway with `infergate-epp` as its endpoint picker instead of the filter: the
//! ext_proc HTTP filter in the endpoint picker protocol's streaming mode, and the
//! pickers' gRPC cluster. The pools' clusters and routes are the filter's: the picker
//! sets the same routing headers and clears the route cache.
//!
//! Several pickers are active-active (they share prefix records and loads through the
//! agent, `epp/src/replicas.rs`). Envoy health-checks each every second on the
//! `HEALTH_STREAMS` service and starts a request's stream only on a healthy one, so a
//! picker that drains on SIGTERM gets no new stream; a stream that cannot start (a
//! picker killed since its last check) is retried on another. A stream already open
//! on a killed picker fails its request: once a body chunk has gone to a picker,
//! Envoy cannot send it anywhere else.

use std::net::SocketAddr;

use infergate_core::wire::cluster::EPP as EPP_CLUSTER;
use infergate_core::wire::epp;
use serde_json::{Value, json};

use crate::clusters::grpc_cluster;

/// The ext_proc filter: request headers and the whole request body streamed both ways
/// (`FULL_DUPLEX_STREAMED`, which needs request trailers sent too), the response
/// headers, and the endpoint the proxy served from forwarded in `envoy.lb`. With
/// several pickers, a stream that cannot start on one is retried on another.
pub(crate) fn filter(pickers: usize) -> Value {
    let mut filter = json!({
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
    });
    if pickers > 1 {
        filter["typed_config"]["grpc_service"]["retry_policy"] = json!({
            "retry_on": "connect-failure,refused-stream,unavailable,reset",
            "num_retries": pickers - 1,
            "retry_host_predicate": [{
                "name": "envoy.retry_host_predicates.previous_hosts",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"},
            }],
            "host_selection_retry_max_attempts": 3,
            // A retry waits at most a quarter second. The policy does not limit how long
            // a stream lives: `tests/tests/epp.rs` serves 1.5 s requests through two
            // pickers.
            "retry_back_off": {"base_interval": "0.025s", "max_interval": "0.25s"},
        });
    }
    filter
}

/// The pickers' cluster, HTTP/2 to `addresses`; several are health-checked, and a
/// picker that fails its check gets no stream (no panic routing to it).
pub(crate) fn cluster(addresses: &[SocketAddr]) -> Value {
    let mut cluster = grpc_cluster(EPP_CLUSTER, addresses.iter().copied());
    if addresses.len() > 1 {
        cluster["health_checks"] = json!([{
            "timeout": "1s",
            "interval": "1s",
            "no_traffic_interval": "1s",
            "unhealthy_threshold": 1,
            "healthy_threshold": 1,
            "grpc_health_check": {"service_name": epp::HEALTH_STREAMS},
        }]);
        cluster["common_lb_config"] = json!({"healthy_panic_threshold": {"value": 0.0}});
    }
    cluster
}
