//! Semantic checks that serde cannot express: cross references, ranges, uniqueness.

use std::collections::HashSet;

use super::discovery::{Discovery, DiscoverySource};
use super::error::{ConfigError, FieldPath};
use super::routing::{ModelConfig, PoolConfig};
use super::scoring::{RoutingSettings, Weights};

/// Longest accepted model name; the name is copied into a request header.
pub const MAX_MODEL_NAME_BYTES: usize = 256;

pub(crate) fn check_settings(settings: &RoutingSettings, at: &FieldPath) -> Result<(), ConfigError> {
    if let Some(weights) = &settings.weights {
        check_weights(weights, &at.key("weights"))?;
    }
    if !(settings.kv_cache_threshold > 0.0 && settings.kv_cache_threshold <= 1.0) {
        return Err(ConfigError::at(
            &at.key("kv_cache_threshold"),
            format!("must be in (0, 1], got {}", settings.kv_cache_threshold),
        ));
    }
    let admission = at.key("admission");
    let a = &settings.admission;
    if !(a.queue_depth_threshold.is_finite() && a.queue_depth_threshold >= 0.0) {
        return Err(ConfigError::at(
            &admission.key("queue_depth_threshold"),
            format!("must be a number of requests, 0 or more, got {}", a.queue_depth_threshold),
        ));
    }
    if !(a.kv_cache_threshold > 0.0 && a.kv_cache_threshold <= 1.0) {
        return Err(ConfigError::at(
            &admission.key("kv_cache_threshold"),
            format!("must be in (0, 1], got {}", a.kv_cache_threshold),
        ));
    }
    let prefix = at.key("prefix");
    let p = &settings.prefix;
    let ranges: [(&'static str, u32, u32, u32); 4] = [
        ("block_chars", p.block_chars, 4, 65_536),
        ("max_blocks", p.max_blocks, 1, 1 << 24),
        ("max_owners", p.max_owners, 1, 4_096),
        ("default_blocks_per_pod", p.default_blocks_per_pod, 1, 10_000_000),
    ];
    for (name, value, low, high) in ranges {
        if !(low..=high).contains(&value) {
            return Err(ConfigError::at(&prefix.key(name), format!("must be between {low} and {high}, got {value}")));
        }
    }
    let cost = at.key("cost");
    let c = &settings.cost;
    let positive = [
        ("prefill_tokens_per_s", c.prefill_tokens_per_s),
        ("decode_step_ms", c.decode_step_ms),
        ("mean_prompt_tokens", c.mean_prompt_tokens),
        ("output_tokens", c.output_tokens),
    ];
    for (name, value) in positive {
        if !(value.is_finite() && value > 0.0) {
            return Err(ConfigError::at(&cost.key(name), format!("must be a finite number > 0, got {value}")));
        }
    }
    let non_negative = [
        ("lora_load_ms", c.lora_load_ms),
        ("unknown_pod_penalty_ms", c.unknown_pod_penalty_ms),
        ("attention_crossover_tokens", c.attention_crossover_tokens),
    ];
    for (name, value) in non_negative {
        if !(value.is_finite() && value >= 0.0) {
            return Err(ConfigError::at(&cost.key(name), format!("must be a finite number >= 0, got {value}")));
        }
    }
    if !(1..=16).contains(&settings.ranked_endpoints) {
        return Err(ConfigError::at(
            &at.key("ranked_endpoints"),
            format!("must be between 1 and 16, got {}", settings.ranked_endpoints),
        ));
    }
    if settings.signal_max_age_ms == 0 {
        return Err(ConfigError::at(&at.key("signal_max_age_ms"), "must be greater than 0"));
    }
    Ok(())
}

pub(crate) fn check_weights(weights: &Weights, at: &FieldPath) -> Result<(), ConfigError> {
    let named = weights.named();
    for (name, value) in named {
        if !value.is_finite() || value < 0.0 {
            return Err(ConfigError::at(&at.key(name), format!("must be a finite number >= 0, got {value}")));
        }
    }
    if named.iter().all(|(_, v)| *v == 0.0) {
        return Err(ConfigError::at(at, "at least one weight must be greater than 0"));
    }
    Ok(())
}

pub(crate) fn check_pools(pools: &[PoolConfig], at: &FieldPath) -> Result<(), ConfigError> {
    if pools.is_empty() {
        return Err(ConfigError::at(at, "at least one pool is required"));
    }
    let mut names = HashSet::new();
    for (i, pool) in pools.iter().enumerate() {
        let here = at.index(i);
        check_pool_name(&pool.name, &here.key("name"))?;
        if !names.insert(pool.name.as_str()) {
            return Err(ConfigError::at(&here.key("name"), format!("duplicate pool name {:?}", pool.name)));
        }
        if pool.endpoints.is_empty() && pool.discovery.is_none() {
            return Err(ConfigError::at(
                &here.key("endpoints"),
                "a pool needs at least one endpoint, or a `discovery` source",
            ));
        }
        if let Some(discovery) = &pool.discovery {
            check_discovery(discovery, &here.key("discovery"))?;
        }
        if let Some(path) = &pool.metrics_path
            && (!path.starts_with('/') || path.contains(|c: char| c.is_whitespace() || c.is_control()))
        {
            return Err(ConfigError::at(
                &here.key("metrics_path"),
                format!("must be a URL path starting with '/', without spaces, got {path:?}"),
            ));
        }
        let mut seen = HashSet::new();
        for (j, endpoint) in pool.endpoints.iter().enumerate() {
            if !seen.insert(endpoint) {
                return Err(ConfigError::at(&here.key("endpoints").index(j), format!("duplicate endpoint {endpoint}")));
            }
        }
        if let Some(weights) = &pool.weights {
            check_weights(weights, &here.key("weights"))?;
        }
    }
    Ok(())
}

pub(crate) fn check_models(models: &[ModelConfig], pools: &[PoolConfig], at: &FieldPath) -> Result<(), ConfigError> {
    if models.is_empty() {
        return Err(ConfigError::at(at, "at least one model is required"));
    }
    let mut names = HashSet::new();
    for (i, model) in models.iter().enumerate() {
        let here = at.index(i);
        check_model_name(&model.name).map_err(|m| ConfigError::at(&here.key("name"), m))?;
        if !names.insert(model.name.as_str()) {
            return Err(ConfigError::at(&here.key("name"), format!("duplicate model name {:?}", model.name)));
        }
        if !pools.iter().any(|p| p.name == model.pool) {
            let known: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
            return Err(ConfigError::at(
                &here.key("pool"),
                format!("unknown pool {:?}; defined pools: {}", model.pool, known.join(", ")),
            ));
        }
        if let Some(adapter) = &model.adapter {
            check_model_name(adapter).map_err(|m| ConfigError::at(&here.key("adapter"), m))?;
        }
    }
    Ok(())
}

fn check_discovery(discovery: &Discovery, at: &FieldPath) -> Result<(), ConfigError> {
    match discovery.source() {
        None => Err(ConfigError::at(at, "set exactly one of `pods` and `inference_pool`")),
        Some(DiscoverySource::Pods(selector)) => {
            let at = at.key("pods");
            check_dns_label(&selector.namespace, &at.key("namespace"))?;
            if selector.match_labels.is_empty() {
                return Err(ConfigError::at(&at.key("match_labels"), "at least one label is required"));
            }
            // The labels go into the API server's `labelSelector` query: a comma or an
            // `=` inside one would change what is selected.
            for (key, value) in &selector.match_labels {
                if !is_label_key(key) {
                    return Err(ConfigError::at(&at.key("match_labels"), format!("{key:?} is not a label key")));
                }
                if !is_label_value(value) {
                    return Err(ConfigError::at(
                        &at.key("match_labels"),
                        format!("{value:?} (of {key}) is not a label value"),
                    ));
                }
            }
            if selector.target_ports.is_empty() || selector.target_ports.len() > 8 {
                return Err(ConfigError::at(&at.key("target_ports"), "give between 1 and 8 ports"));
            }
            if let Some(j) = selector.target_ports.iter().position(|&p| p == 0) {
                return Err(ConfigError::at(&at.key("target_ports").index(j), "port 0 is not a port"));
            }
            Ok(())
        }
        Some(DiscoverySource::InferencePool(reference)) => {
            let at = at.key("inference_pool");
            check_dns_label(&reference.namespace, &at.key("namespace"))?;
            check_dns_label(&reference.name, &at.key("name"))
        }
    }
}

/// Kubernetes namespaces and most object names are RFC 1123 labels.
fn check_dns_label(name: &str, at: &FieldPath) -> Result<(), ConfigError> {
    if is_dns_label(name) {
        Ok(())
    } else {
        Err(ConfigError::at(at, format!("{name:?} is not a valid Kubernetes name (RFC 1123 label)")))
    }
}

/// `[prefix/]name`: the name up to 63 characters of letters, digits, `-`, `_` and `.`,
/// starting and ending alphanumeric; the prefix a DNS subdomain.
fn is_label_key(key: &str) -> bool {
    let (prefix, name) = key.rsplit_once('/').map_or((None, key), |(p, n)| (Some(p), n));
    let prefix_ok = prefix.is_none_or(|p| !p.is_empty() && p.len() <= 253 && p.split('.').all(is_dns_label));
    prefix_ok && !name.is_empty() && is_label_value(name)
}

/// Empty, or up to 63 letters, digits, `-`, `_` and `.`, starting and ending alphanumeric.
fn is_label_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn check_pool_name(name: &str, at: &FieldPath) -> Result<(), ConfigError> {
    if is_dns_label(name) {
        Ok(())
    } else {
        Err(ConfigError::at(
            at,
            format!("invalid pool name {name:?}: use 1-63 lower-case letters, digits and '-', not at either end"),
        ))
    }
}

/// A model name is copied into the `x-gateway-model-name` header, so it must be a
/// valid header value: no control characters (CR and LF would split headers).
pub fn check_model_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".to_string());
    }
    if name.len() > MAX_MODEL_NAME_BYTES {
        return Err(format!("must be at most {MAX_MODEL_NAME_BYTES} bytes, got {}", name.len()));
    }
    if name.chars().any(char::is_control) {
        return Err("must not contain control characters".to_string());
    }
    if name.trim() != name {
        return Err("must not start or end with white space".to_string());
    }
    Ok(())
}
