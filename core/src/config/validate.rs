//! Semantic checks that serde cannot express: cross references, ranges, uniqueness.

use std::collections::HashSet;

use super::discovery::{Discovery, DiscoverySource};
use super::error::{ConfigError, FieldPath};
use super::limits::{self, Limit};
use super::routing::{ModelConfig, PoolConfig};
use super::scoring::{RoutingSettings, Weights};

/// Longest accepted model name; the name is copied into a request header.
pub const MAX_MODEL_NAME_BYTES: usize = 256;

pub(crate) fn check_settings(settings: &RoutingSettings, at: &FieldPath) -> Result<(), ConfigError> {
    if let Some(weights) = &settings.weights {
        check_weights(weights, &at.key("weights"))?;
    }
    limits::KV_CACHE_THRESHOLD.check_number(settings.kv_cache_threshold, at)?;
    let admission = at.key("admission");
    let a = &settings.admission;
    limits::QUEUE_DEPTH_THRESHOLD.check_number(a.queue_depth_threshold, &admission)?;
    limits::ADMISSION_KV_CACHE_THRESHOLD.check_number(a.kv_cache_threshold, &admission)?;
    let prefix = at.key("prefix");
    let p = &settings.prefix;
    for (limit, value) in [
        (limits::BLOCK_CHARS, p.block_chars),
        (limits::MAX_BLOCKS, p.max_blocks),
        (limits::MAX_OWNERS, p.max_owners),
        (limits::DEFAULT_BLOCKS_PER_POD, p.default_blocks_per_pod),
    ] {
        limit.check_integer(u64::from(value), &prefix)?;
    }
    let cost = at.key("cost");
    let c = &settings.cost;
    for (limit, value) in [
        (limits::PREFILL_TOKENS_PER_S, c.prefill_tokens_per_s),
        (limits::DECODE_STEP_MS, c.decode_step_ms),
        (limits::MEAN_PROMPT_TOKENS, c.mean_prompt_tokens),
        (limits::OUTPUT_TOKENS, c.output_tokens),
        (limits::LORA_LOAD_MS, c.lora_load_ms),
        (limits::UNKNOWN_POD_PENALTY_MS, c.unknown_pod_penalty_ms),
        (limits::ATTENTION_CROSSOVER_TOKENS, c.attention_crossover_tokens),
    ] {
        limit.check_number(value, &cost)?;
    }
    limits::RANKED_ENDPOINTS.check_integer(settings.ranked_endpoints as u64, at)?;
    limits::SIGNAL_MAX_AGE_MS.check_integer(settings.signal_max_age_ms, at)
}

pub(crate) fn check_weights(weights: &Weights, at: &FieldPath) -> Result<(), ConfigError> {
    let named = weights.named();
    for (name, value) in named {
        Limit::new(name, limits::WEIGHT).check_number(value, at)?;
    }
    if named.iter().all(|(_, v)| *v == 0.0) {
        return Err(ConfigError::at(at, format!("must have {}", limits::WEIGHTS_NOT_ALL_ZERO.rule)));
    }
    Ok(())
}

pub(crate) fn check_pools(pools: &[PoolConfig], at: &FieldPath) -> Result<(), ConfigError> {
    if pools.is_empty() {
        return Err(ConfigError::at(at, format!("must have {}", limits::POOLS.rule)));
    }
    let mut names = HashSet::new();
    for (i, pool) in pools.iter().enumerate() {
        let here = at.index(i);
        check_pool_name(&pool.name, &here.key("name"))?;
        if !names.insert(pool.name.as_str()) {
            return Err(ConfigError::at(&here.key("name"), format!("duplicate pool name {:?}", pool.name)));
        }
        if pool.endpoints.is_empty() && pool.discovery.is_none() {
            return Err(ConfigError::at(&here.key("endpoints"), format!("must have {}", limits::POOL_ENDPOINTS.rule)));
        }
        if let Some(discovery) = &pool.discovery {
            check_discovery(discovery, &here.key("discovery"))?;
        }
        if let Some(path) = &pool.metrics_path
            && (!path.starts_with('/') || path.contains(|c: char| c.is_whitespace() || c.is_control()))
        {
            return Err(limits::METRICS_PATH.error(&here, format_args!("{path:?}")));
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
        if let Some(disaggregation) = &pool.disaggregation {
            disaggregation.check(&pool.endpoints, &here.key("disaggregation"))?;
        }
    }
    Ok(())
}

pub(crate) fn check_models(models: &[ModelConfig], pools: &[PoolConfig], at: &FieldPath) -> Result<(), ConfigError> {
    if models.is_empty() {
        return Err(ConfigError::at(at, format!("must have {}", limits::MODELS.rule)));
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
        None => Err(ConfigError::at(at, format!("must set {}", limits::POOL_DISCOVERY.rule))),
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
        Err(ConfigError::at(at, format!("must be {}, got {name:?}", limits::POOL_NAME.rule)))
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
