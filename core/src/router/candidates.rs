//! Builds the scoring candidates of a pool from the snapshot, or from the static
//! config when there is none, and decides per pod whether its signals are usable.

use super::DecisionBasis;
use super::inflight::InflightCounts;
use crate::config::{PoolConfig, RoutingSettings};
use crate::scoring::Candidate;
use crate::snapshot::{PodState, Snapshot};

pub(super) fn build(
    pool: &PoolConfig,
    snapshot: Option<&Snapshot>,
    inflight: &InflightCounts,
    settings: &RoutingSettings,
    now_ms: u64,
) -> (Vec<Candidate>, DecisionBasis) {
    let pods = snapshot.and_then(|s| s.pool(&pool.name));
    let candidates: Vec<(Candidate, bool)> = match pods {
        Some(state) => state
            .pods
            .iter()
            .filter(|pod| pod.ready)
            .map(|pod| from_pod(pod, inflight, settings, now_ms))
            .collect(),
        // No snapshot yet, or the pool is new: the static endpoints, on load alone.
        None => pool
            .endpoints
            .iter()
            .map(|&endpoint| (load_only(endpoint, inflight), false))
            .collect(),
    };
    let fresh = candidates.iter().filter(|(_, fresh)| *fresh).count();
    let basis = if fresh == candidates.len() && fresh > 0 {
        DecisionBasis::Signals
    } else if fresh > 0 {
        DecisionBasis::Mixed
    } else {
        DecisionBasis::LoadOnly
    };
    (candidates.into_iter().map(|(c, _)| c).collect(), basis)
}

/// A pod with fresh signals, plus what was sent to it since they were scraped; or,
/// when they are stale or missing, its in-flight count alone.
fn from_pod(
    pod: &PodState,
    inflight: &InflightCounts,
    settings: &RoutingSettings,
    now_ms: u64,
) -> (Candidate, bool) {
    let fresh = pod
        .scraped_at_ms
        .is_some_and(|at| now_ms.saturating_sub(at) <= settings.signal_max_age_ms);
    match (&pod.signals, fresh) {
        (Some(signals), true) => (
            Candidate {
                endpoint: pod.address,
                waiting: signals.waiting + f64::from(inflight.sent_since_snapshot(pod.address)),
                running: signals.running,
                kv_cache_usage: Some(signals.kv_cache_usage),
            },
            true,
        ),
        _ => (load_only(pod.address, inflight), false),
    }
}

fn load_only(endpoint: crate::endpoint::Endpoint, inflight: &InflightCounts) -> Candidate {
    let in_flight = f64::from(inflight.in_flight(endpoint));
    Candidate {
        endpoint,
        waiting: in_flight,
        running: in_flight,
        kv_cache_usage: None,
    }
}
