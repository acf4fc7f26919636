//! Semantic checks that serde cannot express: cross references, ranges, uniqueness.

use std::collections::HashSet;

use super::error::{ConfigError, FieldPath};
use super::routing::{ModelConfig, PoolConfig, RoutingSettings, Weights};

/// Longest accepted model name; the name is copied into a request header.
pub const MAX_MODEL_NAME_BYTES: usize = 256;

pub(crate) fn check_settings(
    settings: &RoutingSettings,
    at: &FieldPath,
) -> Result<(), ConfigError> {
    check_weights(&settings.weights, &at.key("weights"))?;
    if !(1..=16).contains(&settings.ranked_endpoints) {
        return Err(ConfigError::at(
            &at.key("ranked_endpoints"),
            format!(
                "must be between 1 and 16, got {}",
                settings.ranked_endpoints
            ),
        ));
    }
    if settings.signal_max_age_ms == 0 {
        return Err(ConfigError::at(
            &at.key("signal_max_age_ms"),
            "must be greater than 0",
        ));
    }
    Ok(())
}

pub(crate) fn check_weights(weights: &Weights, at: &FieldPath) -> Result<(), ConfigError> {
    let named = [
        ("kv_cache", weights.kv_cache),
        ("queue_depth", weights.queue_depth),
        ("running_requests", weights.running_requests),
    ];
    for (name, value) in named {
        if !value.is_finite() || value < 0.0 {
            return Err(ConfigError::at(
                &at.key(name),
                format!("must be a finite number >= 0, got {value}"),
            ));
        }
    }
    if named.iter().all(|(_, v)| *v == 0.0) {
        return Err(ConfigError::at(
            at,
            "at least one weight must be greater than 0",
        ));
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
            return Err(ConfigError::at(
                &here.key("name"),
                format!("duplicate pool name {:?}", pool.name),
            ));
        }
        if pool.endpoints.is_empty() {
            return Err(ConfigError::at(
                &here.key("endpoints"),
                "a pool needs at least one endpoint",
            ));
        }
        let mut seen = HashSet::new();
        for (j, endpoint) in pool.endpoints.iter().enumerate() {
            if !seen.insert(endpoint) {
                return Err(ConfigError::at(
                    &here.key("endpoints").index(j),
                    format!("duplicate endpoint {endpoint}"),
                ));
            }
        }
        if let Some(weights) = &pool.weights {
            check_weights(weights, &here.key("weights"))?;
        }
    }
    Ok(())
}

pub(crate) fn check_models(
    models: &[ModelConfig],
    pools: &[PoolConfig],
    at: &FieldPath,
) -> Result<(), ConfigError> {
    if models.is_empty() {
        return Err(ConfigError::at(at, "at least one model is required"));
    }
    let mut names = HashSet::new();
    for (i, model) in models.iter().enumerate() {
        let here = at.index(i);
        check_model_name(&model.name).map_err(|m| ConfigError::at(&here.key("name"), m))?;
        if !names.insert(model.name.as_str()) {
            return Err(ConfigError::at(
                &here.key("name"),
                format!("duplicate model name {:?}", model.name),
            ));
        }
        if !pools.iter().any(|p| p.name == model.pool) {
            let known: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
            return Err(ConfigError::at(
                &here.key("pool"),
                format!(
                    "unknown pool {:?}; defined pools: {}",
                    model.pool,
                    known.join(", ")
                ),
            ));
        }
        if let Some(adapter) = &model.adapter {
            check_model_name(adapter).map_err(|m| ConfigError::at(&here.key("adapter"), m))?;
        }
    }
    Ok(())
}

fn check_pool_name(name: &str, at: &FieldPath) -> Result<(), ConfigError> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if valid {
        Ok(())
    } else {
        Err(ConfigError::at(
            at,
            format!(
                "invalid pool name {name:?}: use 1-63 lower-case letters, digits and '-', not at either end"
            ),
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
        return Err(format!(
            "must be at most {MAX_MODEL_NAME_BYTES} bytes, got {}",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Err("must not contain control characters".to_string());
    }
    if name.trim() != name {
        return Err("must not start or end with white space".to_string());
    }
    Ok(())
}
