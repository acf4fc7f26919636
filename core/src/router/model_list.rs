//! `GET /v1/models` in OpenAI's list shape, from the active config.

use serde::Serialize;

use crate::config::RoutingConfig;

#[derive(Serialize)]
struct ModelList<'a> {
    object: &'static str,
    data: Vec<ModelEntry<'a>>,
}

#[derive(Serialize)]
struct ModelEntry<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
    /// The pool that serves it, so an operator can see the mapping.
    pool: &'a str,
}

pub(super) fn body(config: &RoutingConfig, created_s: u64) -> Vec<u8> {
    let list = ModelList {
        object: "list",
        data: config
            .models
            .iter()
            .map(|m| ModelEntry {
                id: &m.name,
                object: "model",
                created: created_s,
                owned_by: "infergate",
                pool: &m.pool,
            })
            .collect(),
    };
    serde_json::to_vec(&list).unwrap_or_default()
}
