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
    list_body(config.models.iter().map(|m| (m.name.as_str(), m.pool.as_str())), created_s)
}

/// The list of `(model, where it is served)`: a pool, or on the global router the
/// clusters.
pub fn list_body<'a>(models: impl Iterator<Item = (&'a str, &'a str)>, created_s: u64) -> Vec<u8> {
    let list = ModelList {
        object: "list",
        data: models
            .map(|(id, pool)| ModelEntry { id, object: "model", created: created_s, owned_by: "infergate", pool })
            .collect(),
    };
    serde_json::to_vec(&list).unwrap_or_default()
}
