//! Which of its pool's LoRA adapters each pod serves, read from the engine's OpenAI
//! model list (`/v1/models`): vLLM lists every adapter registered with
//! `--lora-modules` or loaded at run time, and answers a request for any other 404.
//! With the lists in the snapshot, the router sends an adapter's requests only to the
//! pods that list it (`router::candidates`).
//!
//! Lists change only when an adapter is loaded or unloaded, so a pod's is read again
//! every [`REFRESH_MS`] at most, in the same round as its metrics, and only for pools
//! whose config declares adapters. A failed read keeps the last list; an engine that
//! serves no list (404) leaves the pod's adapters unknown.

use std::collections::HashMap;
use std::time::Duration;

use infergate_core::Endpoint;
use infergate_core::config::InfergateConfig;
use infergate_core::wire::path::MODELS;

use crate::scrape::{ScrapeError, classify};

/// How often a pod's model list is read again.
pub const REFRESH_MS: u64 = 2_000;

/// A list last read successfully this long ago says nothing any more: the pod's
/// adapters go back to unknown until a read succeeds.
pub const STALE_AFTER_MS: u64 = 5 * REFRESH_MS;

/// The largest model list read; a longer answer is refused as a failed read.
const MAX_LIST_BYTES: usize = 1 << 20;

/// The last list read from each pod, and when.
#[derive(Debug, Default)]
pub struct AdapterLists {
    pods: HashMap<Endpoint, Listed>,
}

#[derive(Debug)]
struct Listed {
    /// The declared adapters the list had; `None` when the engine serves no list.
    adapters: Option<Vec<String>>,
    /// The last read, and the last one that succeeded.
    read_at_ms: u64,
    listed_at_ms: u64,
    /// The last failure logged, so that a pod failing the same way is logged once.
    failure: Option<String>,
}

impl AdapterLists {
    /// Whether `pod`'s list is due for a read at `now_ms`.
    pub fn due(&self, pod: Endpoint, now_ms: u64) -> bool {
        self.pods.get(&pod).is_none_or(|listed| now_ms.saturating_sub(listed.read_at_ms) >= REFRESH_MS)
    }

    /// Takes the outcome of a read of `pod`'s list at `now_ms`; `declared` are the
    /// adapters its pool's models name, the only ones kept.
    pub fn record(&mut self, pod: Endpoint, read: Result<Vec<String>, ScrapeError>, declared: &[String], now_ms: u64) {
        let listed = self.pods.entry(pod).or_insert(Listed {
            adapters: None,
            read_at_ms: now_ms,
            listed_at_ms: now_ms,
            failure: None,
        });
        listed.read_at_ms = now_ms;
        match read {
            Ok(ids) => {
                let adapters: Vec<String> = declared.iter().filter(|adapter| ids.contains(adapter)).cloned().collect();
                if listed.adapters.as_ref() != Some(&adapters) {
                    tracing::info!(pod = %pod, adapters = ?adapters, "the pod's model list has these of its pool's adapters");
                }
                listed.adapters = Some(adapters);
                listed.listed_at_ms = now_ms;
                listed.failure = None;
            }
            Err(ScrapeError::Status(404)) => {
                if listed.failure.is_none() {
                    tracing::info!(pod = %pod, path = MODELS, "the pod serves no model list: its adapters stay unknown");
                }
                listed.adapters = None;
                listed.failure = Some("404".into());
            }
            Err(error) => {
                let message = error.to_string();
                if listed.failure.as_ref() != Some(&message) {
                    tracing::warn!(pod = %pod, path = MODELS, error = %message, "reading the model list failed; keeping the last one");
                }
                listed.failure = Some(message);
            }
        }
    }

    /// The declared adapters `pod`'s last list had, unless that list is older than
    /// [`STALE_AFTER_MS`] at `now_ms`.
    pub fn served(&self, pod: Endpoint, now_ms: u64) -> Option<Vec<String>> {
        let listed = self.pods.get(&pod)?;
        if now_ms.saturating_sub(listed.listed_at_ms) > STALE_AFTER_MS {
            return None;
        }
        listed.adapters.clone()
    }

    /// Forgets the pods not in `present`.
    pub fn retain(&mut self, present: &std::collections::HashSet<Endpoint>) {
        self.pods.retain(|pod, _| present.contains(pod));
    }
}

/// The adapters the models of `config`'s pool `pool_index` name, in config order.
pub fn declared(config: &InfergateConfig, pool_index: usize) -> Vec<String> {
    let Some(pool) = config.pools.get(pool_index) else { return Vec::new() };
    let mut adapters: Vec<String> = Vec::new();
    for adapter in config.models.iter().filter(|m| m.pool == pool.name).filter_map(|m| m.adapter.as_ref()) {
        if !adapters.contains(adapter) {
            adapters.push(adapter.clone());
        }
    }
    adapters
}

#[derive(serde::Deserialize)]
struct ModelList {
    data: Vec<ModelEntry>,
}

#[derive(serde::Deserialize)]
struct ModelEntry {
    id: String,
}

/// Reads the ids of `pod`'s model list.
pub async fn fetch(client: &reqwest::Client, pod: Endpoint, timeout: Duration) -> Result<Vec<String>, ScrapeError> {
    let mut response =
        client.get(format!("http://{pod}{MODELS}")).timeout(timeout).send().await.map_err(|e| classify(&e, timeout))?;
    if !response.status().is_success() {
        return Err(ScrapeError::Status(response.status().as_u16()));
    }
    let too_long = || ScrapeError::Other(format!("a model list over {MAX_LIST_BYTES} bytes"));
    if response.content_length().is_some_and(|length| length > MAX_LIST_BYTES as u64) {
        return Err(too_long());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| classify(&e, timeout))? {
        if body.len() + chunk.len() > MAX_LIST_BYTES {
            return Err(too_long());
        }
        body.extend_from_slice(&chunk);
    }
    let list: ModelList = serde_json::from_slice(&body)
        .map_err(|e| ScrapeError::Other(format!("not an OpenAI model list ({{\"data\": [{{\"id\": …}}]}}): {e}")))?;
    Ok(list.data.into_iter().map(|entry| entry.id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(port: u16) -> Endpoint {
        Endpoint::new(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
    }

    #[test]
    fn keeps_the_declared_adapters_a_list_has_and_reads_it_again_when_due() {
        let mut lists = AdapterLists::default();
        assert!(lists.due(ep(1), 0));
        let ids = vec!["llama".to_string(), "sql-lora".to_string(), "undeclared".to_string()];
        let declared = ["sql-lora".to_string(), "chat-lora".to_string()];
        lists.record(ep(1), Ok(ids), &declared, 1_000);
        assert_eq!(lists.served(ep(1), 1_000), Some(vec!["sql-lora".to_string()]));
        assert!(!lists.due(ep(1), 1_000 + REFRESH_MS - 1));
        assert!(lists.due(ep(1), 1_000 + REFRESH_MS));
        // A failed read keeps the last list.
        lists.record(ep(1), Err(ScrapeError::Timeout(Duration::from_millis(5))), &declared, 4_000);
        assert_eq!(lists.served(ep(1), 4_000), Some(vec!["sql-lora".to_string()]));
        assert!(!lists.due(ep(1), 4_001), "a failed read waits for the next refresh too");
        // Reads that keep failing: the list goes stale, unknown again.
        assert_eq!(lists.served(ep(1), 1_000 + STALE_AFTER_MS + 1), None);
        // An engine without a list: unknown, not "none".
        lists.record(ep(1), Err(ScrapeError::Status(404)), &declared, 7_000);
        assert_eq!(lists.served(ep(1), 7_000), None);
        assert_eq!(lists.served(ep(2), 7_000), None);
    }
}
