//! The gateway listener (clients) and the control listener (the agent).

use std::net::SocketAddr;

use infergate_core::config::{GatewaySettings, InfergateConfig};
use serde_json::{Value, json};

use crate::RenderOptions;
use crate::clusters::{UpstreamPolicy, cluster_name};
use crate::wasm::{self, PluginConfigError};

/// Header the router filter sets to the request's model: a LoRA model's route matches it.
use infergate_core::wire::header::MODEL as MODEL_HEADER;
/// Header the router filter sets to select the pool's route.
pub(crate) use infergate_core::wire::header::POOL as POOL_HEADER;
/// Room above the body limit so that the filter, not Envoy's buffer, answers 413.
pub(crate) const BUFFER_HEADROOM_BYTES: u64 = 1024 * 1024;

pub(crate) fn socket_address(addr: SocketAddr) -> Value {
    json!({"socket_address": {"address": addr.ip().to_string(), "port_value": addr.port()}})
}

pub(crate) fn http_connection_manager(
    stat_prefix: &str,
    routes: Value,
    filters: Vec<Value>,
    access_log: bool,
) -> Value {
    let mut http_filters = filters;
    http_filters.push(json!({
        "name": "envoy.filters.http.router",
        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
    }));
    let mut hcm = json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": stat_prefix,
        "route_config": {"name": stat_prefix, "virtual_hosts": [{"name": stat_prefix, "domains": ["*"], "routes": routes}]},
        "http_filters": http_filters,
    });
    if access_log {
        hcm["access_log"] = json!([{
            "name": "envoy.access_loggers.stdout",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
                "log_format": {"text_format_source": {"inline_string":
                    "[access] %START_TIME% \"%REQ(:METHOD)% %REQ(:PATH)%\" %RESPONSE_CODE% %RESPONSE_FLAGS% model=%REQ(X-GATEWAY-MODEL-NAME)% pool=%REQ(X-INFERGATE-POOL)% upstream=%UPSTREAM_HOST% attempts=%UPSTREAM_REQUEST_ATTEMPT_COUNT% duration_ms=%DURATION% ttfb_ms=%RESPONSE_DURATION% decision=\"%RESP(X-INFERGATE-DECISION)%\"\n"}},
            },
        }]);
    }
    json!({"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm})
}

pub(crate) fn not_found_route(message: &str) -> Value {
    let body =
        json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": "no_route"}});
    json!({
        "match": {"prefix": "/"},
        "direct_response": {"status": 404, "body": {"inline_string": body.to_string()}},
    })
}

fn pool_routes(config: &InfergateConfig, options: &RenderOptions) -> Value {
    let timeout = format!("{}s", config.gateway.request_timeout_ms.div_ceil(1000));
    // A LoRA model first: a pod that does not hold its adapter answers 404 (vLLM
    // without the adapter loaded), and another pod of the pool may hold it.
    let lora_routes = config.models.iter().filter(|model| model.adapter.is_some()).map(|model| {
        json!({
            "match": {"prefix": "/", "headers": [
                {"name": POOL_HEADER, "string_match": {"exact": model.pool}},
                {"name": MODEL_HEADER, "string_match": {"exact": model.name}},
            ]},
            "route": {
                "cluster": cluster_name(&model.pool),
                "timeout": timeout,
                "retry_policy": retry_policy_for(config.gateway.retries, &[503, 404]),
            },
        })
    });
    let pool_routes = config.pools.iter().map(|pool| {
        json!({
            "match": {"prefix": "/", "headers": [{"name": POOL_HEADER, "string_match": {"exact": pool.name}}]},
            "route": {
                "cluster": cluster_name(&pool.name),
                "timeout": timeout,
                "retry_policy": retry_policy(config.gateway.retries),
            },
        })
    });
    let mut routes: Vec<Value> = if options.upstream_policy == UpstreamPolicy::Infergate {
        lora_routes.chain(pool_routes).collect()
    } else {
        pool_routes.collect()
    };
    if options.upstream_policy != UpstreamPolicy::Infergate {
        // Baseline mode has no filter to name the pool; route on the model header that
        // clients of a baseline would set, else to the first pool.
        for model in &config.models {
            routes.insert(
                0,
                json!({
                    "match": {"prefix": "/", "headers": [{"name": "x-model", "string_match": {"exact": model.name}}]},
                    "route": {"cluster": cluster_name(&model.pool), "timeout": timeout, "retry_policy": retry_policy(config.gateway.retries)},
                }),
            );
        }
        if let Some(first) = config.pools.first() {
            routes.push(
                json!({"match": {"prefix": "/"}, "route": {"cluster": cluster_name(&first.name), "timeout": timeout}}),
            );
        }
    }
    routes.push(not_found_route("No pool serves this request."));
    Value::Array(routes)
}

/// Retries go to the next pod in the ranked header, never to one already tried.
pub(crate) fn retry_policy(retries: u32) -> Value {
    retry_policy_for(retries, &[503])
}

/// [`retry_policy`], retrying these upstream statuses.
fn retry_policy_for(retries: u32, statuses: &[u16]) -> Value {
    json!({
        "retry_on": "connect-failure,reset,retriable-status-codes",
        "retriable_status_codes": statuses,
        "num_retries": retries,
        "retry_host_predicate": [{
            "name": "envoy.retry_host_predicates.previous_hosts",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"},
        }],
        "host_selection_retry_max_attempts": 5,
    })
}

pub(crate) fn gateway(config: &InfergateConfig, options: &RenderOptions) -> Result<Value, PluginConfigError> {
    let mut filters = match options.upstream_policy {
        UpstreamPolicy::Infergate => crate::identity::filters(&config.identity, &config.flow_control.tenant_header),
        _ => Vec::new(),
    };
    match (options.upstream_policy, options.ext_proc.is_empty()) {
        (UpstreamPolicy::Infergate, false) => filters.push(crate::ext_proc::filter(options.ext_proc.len())),
        (UpstreamPolicy::Infergate, true) => filters.push(wasm::router_filter(config, options)?),
        _ => {}
    }
    Ok(json!({
        "name": "gateway",
        "address": socket_address(config.gateway.listen),
        "per_connection_buffer_limit_bytes": config.gateway.max_body_bytes + BUFFER_HEADROOM_BYTES,
        // LLM clients hold few long-lived connections; spread them evenly over workers.
        "connection_balance_config": {"exact_balance": {}},
        "filter_chains": [{"filters": [http_connection_manager("gateway", pool_routes(config, options), filters, options.access_log)]}],
    }))
}

pub(crate) fn control(gateway: &GatewaySettings, options: &RenderOptions) -> Result<Value, PluginConfigError> {
    let filters = if options.upstream_policy == UpstreamPolicy::Infergate {
        vec![wasm::control_filter(options)?]
    } else {
        Vec::new()
    };
    Ok(json!({
        "name": "control",
        "address": socket_address(gateway.control),
        "per_connection_buffer_limit_bytes": infergate_core::snapshot::MAX_SNAPSHOT_BYTES + 65536,
        "filter_chains": [{"filters": [http_connection_manager(
            "control",
            Value::Array(vec![not_found_route("The control listener only accepts snapshot pushes.")]),
            filters,
            false,
        )]}],
    }))
}
