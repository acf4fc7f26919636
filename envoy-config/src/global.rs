//! The global router's bootstrap: the clients' listener with the filter in its
//! `global` role, the control listener where the clusters' agents push summaries, and
//! one `override_host` cluster of the clusters' gateways. Each retry goes to the next
//! gateway in the filter's ranking, never to one already tried.

use infergate_core::filter_config::{FilterConfig, GlobalRole};
use infergate_core::global::GlobalRouterConfig;
use serde_json::{Value, json};

use crate::clusters::{UpstreamPolicy, static_cluster};
use crate::listeners::{BUFFER_HEADROOM_BYTES, http_connection_manager, retry_policy, socket_address};
use crate::{RenderOptions, listeners, wasm};

/// The cluster of tier-1 gateways.
pub const GATEWAYS_CLUSTER: &str = "tier1-gateways";

pub fn render_global_bootstrap(config: &GlobalRouterConfig, options: &RenderOptions) -> Value {
    let timeout = format!("{}s", config.gateway.request_timeout_ms.div_ceil(1000));
    let routes = json!([{
        "match": {"prefix": "/"},
        "route": {"cluster": GATEWAYS_CLUSTER, "timeout": timeout, "retry_policy": retry_policy(config.gateway.retries)},
    }]);
    let role = FilterConfig::Global(Box::new(GlobalRole { config: config.clone(), explain: options.explain }));
    let filter = json!({"name": "envoy.filters.http.wasm", "typed_config": wasm::typed_config("infergate-global", "global", &role, options)});
    let listener = json!({
        "name": "global",
        "address": socket_address(config.gateway.listen),
        "per_connection_buffer_limit_bytes": config.gateway.max_body_bytes + BUFFER_HEADROOM_BYTES,
        "connection_balance_config": {"exact_balance": {}},
        "filter_chains": [{"filters": [http_connection_manager("global", routes, vec![filter], options.access_log)]}],
    });
    let gateways = static_cluster(
        GATEWAYS_CLUSTER,
        config.clusters.iter().map(|c| c.gateway.socket_addr()),
        UpstreamPolicy::Infergate,
    );
    json!({
        "node": {"id": "infergate-global", "cluster": "infergate-global"},
        "admin": {"address": socket_address(config.gateway.admin)},
        "static_resources": {
            "listeners": [listener, listeners::control(&config.gateway, options)],
            "clusters": [gateways],
        },
    })
}

/// The bootstrap as YAML text, with a header saying where it came from.
pub fn render_global_bootstrap_yaml(config: &GlobalRouterConfig, options: &RenderOptions) -> Result<String, String> {
    let body = serde_yaml_ng::to_string(&render_global_bootstrap(config, options)).map_err(|e| e.to_string())?;
    Ok(format!(
        "# Rendered by infergate-envoy-config --target global; edit infergate-global.yaml, not this one.\n{body}"
    ))
}
