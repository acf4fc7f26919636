//! The global router's bootstrap: the clients' listener with the filter in its
//! `global` role, the control listener where the clusters' agents push summaries, and
//! one `override_host` cluster of the clusters' gateways. Each retry goes to the next
//! gateway in the filter's ranking, never to one already tried.

use infergate_core::filter_config::{FilterConfig, GlobalRole};
use infergate_core::global::{GlobalRouterConfig, RateLimits};
use infergate_core::wire::cluster::{RATE_LIMIT as RATE_LIMIT_CLUSTER, USAGE as USAGE_CLUSTER};
use infergate_core::wire::header::{
    MODEL as MODEL_HEADER, PROMPT_TOKENS as PROMPT_TOKENS_HEADER, TENANT as TENANT_HEADER,
};
use serde_json::{Value, json};

use crate::clusters::{UpstreamPolicy, grpc_cluster, static_cluster};
use crate::listeners::{BUFFER_HEADROOM_BYTES, http_connection_manager, retry_policy, socket_address};
use crate::wasm::{self, PluginConfigError};
use crate::{RenderOptions, listeners};

/// The cluster of tier-1 gateways.
pub const GATEWAYS_CLUSTER: &str = "tier1-gateways";

pub fn render_global_bootstrap(
    config: &GlobalRouterConfig,
    options: &RenderOptions,
) -> Result<Value, PluginConfigError> {
    let timeout = format!("{}s", config.gateway.request_timeout_ms.div_ceil(1000));
    let mut route = json!({
        "match": {"prefix": "/"},
        "route": {"cluster": GATEWAYS_CLUSTER, "timeout": timeout, "retry_policy": retry_policy(config.gateway.retries)},
    });
    let role = FilterConfig::Global(Box::new(GlobalRole {
        config: config.clone(),
        token_env: options.token_env.clone(),
        explain: options.explain,
    }));
    let tenant_fallback = config.rate_limits.as_ref().map_or("authorization", |limits| limits.tenant_header.as_str());
    let mut filters = crate::identity::filters(&config.identity, tenant_fallback);
    filters.push(json!({
        "name": "envoy.filters.http.wasm",
        "typed_config": wasm::typed_config("infergate-global", "global", &role, options)?,
    }));
    let mut clusters = vec![static_cluster(
        GATEWAYS_CLUSTER,
        config.clusters.iter().map(|c| c.gateway.socket_addr()),
        UpstreamPolicy::Infergate,
    )];
    clusters.extend(crate::identity::jwks_cluster(&config.identity));
    if let Some(limits) = &config.rate_limits {
        route["route"]["rate_limits"] = descriptors();
        filters.push(rate_limit_filter(limits));
        clusters.extend(rate_limit_clusters(limits));
    }
    let routes = json!([route]);
    let listener = json!({
        "name": "global",
        "address": socket_address(config.gateway.listen),
        "per_connection_buffer_limit_bytes": config.gateway.max_body_bytes + BUFFER_HEADROOM_BYTES,
        "connection_balance_config": {"exact_balance": {}},
        "filter_chains": [{"filters": [http_connection_manager("global", routes, filters, options.access_log)]}],
    });
    Ok(json!({
        "node": {"id": "infergate-global", "cluster": "infergate-global"},
        "admin": {"address": socket_address(config.gateway.admin)},
        "static_resources": {
            "listeners": [listener, listeners::control(&config.gateway, options)?],
            "clusters": clusters,
        },
    }))
}

/// The bootstrap as YAML text, with a header saying where it came from.
pub fn render_global_bootstrap_yaml(config: &GlobalRouterConfig, options: &RenderOptions) -> Result<String, String> {
    let bootstrap = render_global_bootstrap(config, options).map_err(|e| e.to_string())?;
    let body = serde_yaml_ng::to_string(&bootstrap).map_err(|e| e.to_string())?;
    Ok(format!(
        "# Rendered by infergate-envoy-config --target global; edit infergate-global.yaml, not this one.\n{body}"
    ))
}

/// Two descriptors per request, each per tenant and model: one request, and the prompt
/// tokens the filter estimated. Envoy skips a descriptor whose header is missing.
fn descriptors() -> Value {
    let header = |name: &str, key: &str| json!({"request_headers": {"header_name": name, "descriptor_key": key}});
    let per = |kind: &str| {
        vec![
            json!({"generic_key": {"descriptor_key": "limit", "descriptor_value": kind}}),
            header(TENANT_HEADER, "tenant"),
            header(MODEL_HEADER, "model"),
        ]
    };
    let mut tokens = per("tokens");
    tokens.push(header(PROMPT_TOKENS_HEADER, "tokens"));
    json!([{"actions": per("requests")}, {"actions": tokens}])
}

/// Envoy's own global rate limit filter, after ours (which sets the headers it reads).
fn rate_limit_filter(limits: &RateLimits) -> Value {
    json!({
        "name": "envoy.filters.http.ratelimit",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
            "domain": "infergate",
            "timeout": "0.25s",
            // A rate limit service that cannot answer admits, unless told otherwise.
            "failure_mode_deny": limits.failure_mode_deny,
            "rate_limit_service": {
                "grpc_service": {"envoy_grpc": {"cluster_name": RATE_LIMIT_CLUSTER}},
                "transport_api_version": "V3",
            },
        },
    })
}

fn rate_limit_clusters(limits: &RateLimits) -> Vec<Value> {
    let grpc = grpc_cluster(RATE_LIMIT_CLUSTER, std::iter::once(limits.service.socket_addr()));
    let usage = static_cluster(USAGE_CLUSTER, std::iter::once(limits.usage.socket_addr()), UpstreamPolicy::RoundRobin);
    vec![grpc, usage]
}
