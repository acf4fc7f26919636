//! One cluster per pool. With infergate, the `override_host` policy sends each request
//! to the pods the filter ranked; the baselines use Envoy's own policies instead.

use infergate_core::config::InfergateConfig;
use serde_json::{Value, json};

use crate::listeners::socket_address;

/// Header the override_host policy reads: `ip:port,ip:port,...`, best first.
use infergate_core::wire::header::ENDPOINT as ENDPOINT_HEADER;

/// How a pool's cluster picks a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum UpstreamPolicy {
    /// The infergate filter ranks pods; `least_request` if it named none.
    #[default]
    Infergate,
    /// Envoy's round robin, no filter (a baseline).
    RoundRobin,
    /// Envoy's least request (power of two choices), no filter (a baseline).
    LeastRequest,
    /// Envoy's random, no filter (a baseline).
    Random,
}

pub fn cluster_name(pool: &str) -> String {
    infergate_core::wire::cluster::pool(pool)
}

fn policy(name: &str, type_name: &str) -> Value {
    json!({"policies": [{"typed_extension_config": {
        "name": name,
        "typed_config": {"@type": format!("type.googleapis.com/{type_name}")},
    }}]})
}

pub(crate) fn load_balancing_policy(upstream: UpstreamPolicy) -> Value {
    let least_request = || {
        policy(
            "envoy.load_balancing_policies.least_request",
            "envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest",
        )
    };
    match upstream {
        UpstreamPolicy::Infergate => json!({"policies": [{"typed_extension_config": {
            "name": "envoy.load_balancing_policies.override_host",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost",
                "override_host_sources": [{"header": ENDPOINT_HEADER}],
                "fallback_policy": least_request(),
            },
        }}]}),
        UpstreamPolicy::LeastRequest => least_request(),
        UpstreamPolicy::RoundRobin => policy(
            "envoy.load_balancing_policies.round_robin",
            "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin",
        ),
        UpstreamPolicy::Random => {
            policy("envoy.load_balancing_policies.random", "envoy.extensions.load_balancing_policies.random.v3.Random")
        }
    }
}

/// A cluster of fixed hosts balanced by `upstream`.
pub(crate) fn static_cluster(
    name: &str,
    hosts: impl Iterator<Item = std::net::SocketAddr>,
    upstream: UpstreamPolicy,
) -> Value {
    let endpoints: Vec<Value> = hosts.map(|addr| json!({"endpoint": {"address": socket_address(addr)}})).collect();
    json!({
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": endpoints}]},
        "load_balancing_policy": load_balancing_policy(upstream),
        // LLM servers hold many long requests; Envoy's default of 1024 would shed.
        "circuit_breakers": {"thresholds": [{
            "max_connections": 100_000, "max_pending_requests": 100_000,
            "max_requests": 100_000, "max_retries": 1_000,
        }]},
    })
}

/// A cluster of one gRPC service (HTTP/2) at `addresses`, round robin.
pub(crate) fn grpc_cluster(name: &str, addresses: impl Iterator<Item = std::net::SocketAddr>) -> Value {
    let mut cluster = static_cluster(name, addresses, UpstreamPolicy::RoundRobin);
    cluster["typed_extension_protocol_options"] = json!({
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}},
        },
    });
    cluster
}

pub(crate) fn pool_clusters(config: &InfergateConfig, upstream: UpstreamPolicy) -> Vec<Value> {
    config
        .pools
        .iter()
        .map(|pool| static_cluster(&cluster_name(&pool.name), pool.endpoints.iter().map(|e| e.socket_addr()), upstream))
        .collect()
}
