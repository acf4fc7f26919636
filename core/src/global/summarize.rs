//! A cluster's summary, built from the same snapshot its tier-1 gateway routes on and
//! ranked by the same router: the predicted time to first token is what tier 1 would
//! predict for a typical request (the mean prompt, no cached prefix) on its best pod.

use super::summary::{ClusterSummary, ModelSummary, SUMMARY_VERSION};
use crate::request::InferenceRequest;
use crate::router::{LocalLedger, Router};
use crate::snapshot::{PodState, Snapshot};

/// What a cluster's agent sends every `interval_ms`: `gateway_healthy` says whether its
/// last push to its own gateway was accepted.
pub fn summarize(
    snapshot: &Snapshot,
    cluster: &str,
    sequence: u64,
    gateway_healthy: bool,
    now_ms: u64,
    interval_ms: u64,
) -> ClusterSummary {
    let settings = &snapshot.routing.settings;
    let mut router = Router::new(snapshot.routing.clone(), sequence);
    router.apply_snapshot(snapshot.clone(), &LocalLedger::default());
    let typical_prompt_bytes =
        (settings.cost.mean_prompt_tokens.max(1.0) * crate::wire::CHARS_PER_TOKEN as f64) as usize;
    let fresh = |pod: &&PodState| {
        pod.ready
            && pod.signals.is_some()
            && pod.scraped_at_ms.is_some_and(|at| now_ms.saturating_sub(at) <= settings.signal_max_age_ms)
    };
    let models = snapshot
        .routing
        .models
        .iter()
        .map(|model| {
            let pods: Vec<&PodState> = snapshot
                .pools
                .iter()
                .filter(|p| p.name == model.pool)
                .flat_map(|p| p.pods.iter())
                .filter(fresh)
                .collect();
            // Counts sum what the pods report; KV use averages over the pods that
            // report it: an engine that does not export a signal adds nothing.
            let signals = || pods.iter().filter_map(|p| p.signals.as_ref());
            let waiting: f64 = signals().filter_map(|s| s.waiting).sum();
            let running: f64 = signals().filter_map(|s| s.running).sum();
            let (kv, kv_pods) =
                signals().filter_map(|s| s.kv_cache_usage).fold((0.0, 0usize), |(k, n), usage| (k + usage, n + 1));
            let request = InferenceRequest {
                model: model.name.clone(),
                stream: false,
                prompt_len: typical_prompt_bytes,
                ..Default::default()
            };
            let predicted = router.route(&request, now_ms, &mut LocalLedger::default()).map(|d| d.chosen.ttft);
            let ready = if pods.is_empty() { 0 } else { u32::try_from(pods.len()).unwrap_or(u32::MAX) };
            ModelSummary {
                model: model.name.clone(),
                ready_pods: if predicted.is_ok() { ready } else { 0 },
                waiting,
                running,
                kv_cache_usage: if kv_pods == 0 { 0.0 } else { kv / kv_pods as f64 },
                predicted_ttft_ms: predicted.as_ref().map_or(0.0, |t| finite(t.ttft_ms)),
                prefill_ms: predicted.as_ref().map_or(0.0, |t| finite(t.prefill_ms)),
            }
        })
        .collect();
    ClusterSummary {
        version: SUMMARY_VERSION,
        cluster: cluster.to_string(),
        sequence,
        created_at_ms: now_ms,
        interval_ms,
        gateway_healthy,
        models,
    }
}

fn finite(ms: f64) -> f64 {
    if ms.is_finite() && ms >= 0.0 { ms } else { 0.0 }
}
