//! Cluster summaries in shared data, on the global router: the control filter stores
//! each cluster's newest under its own key, refusing replays, and bumps a generation;
//! the global router's workers reload their summaries when the generation moves.

use infergate_core::global::{ClusterSummary, SummaryError, summary_key};
use infergate_core::wire::shared_data::SUMMARY_GENERATION;

use super::generation;
use crate::host::{Host, UpdateError};

pub enum StoreError {
    Invalid(SummaryError),
    /// Not newer than the stored summary of that cluster: a replay or a second agent.
    Replay {
        cluster: String,
        sequence: u64,
        newest: u64,
    },
    Host(String),
}

/// Validates and stores a summary; returns its cluster and sequence.
pub fn store(host: &dyn Host, bytes: &[u8]) -> Result<(String, u64), StoreError> {
    let summary = ClusterSummary::decode(bytes).map_err(StoreError::Invalid)?;
    let key = summary_key(&summary.cluster);
    let refuse_replay = |current: Option<&[u8]>| {
        let newest = current.and_then(|b| ClusterSummary::decode(b).ok()).map(|s| s.sequence);
        match newest.filter(|&n| summary.sequence <= n) {
            Some(newest) => Err(newest),
            None => Ok(bytes),
        }
    };
    match host.update_shared_data(&key, refuse_replay) {
        Ok(()) => {}
        Err(UpdateError::Declined(newest)) => {
            return Err(StoreError::Replay { cluster: summary.cluster, sequence: summary.sequence, newest });
        }
        Err(UpdateError::Contended) => {
            return Err(StoreError::Host(format!("cannot store the summary of {}: contended", summary.cluster)));
        }
        Err(UpdateError::Host(status)) => {
            return Err(StoreError::Host(format!("cannot store the summary of {}: {status:?}", summary.cluster)));
        }
    }
    bump_generation(host);
    Ok((summary.cluster, summary.sequence))
}

fn bump_generation(host: &dyn Host) {
    if generation::bump(host, SUMMARY_GENERATION).is_err() {
        log::warn!("infergate control: the summary generation is contended; readers catch up on the next store");
    }
}

/// The summary generation, read per request.
pub fn generation(host: &dyn Host) -> u64 {
    generation::read(host, SUMMARY_GENERATION)
}

/// The newest stored summary of `cluster`, if any decodes.
pub fn load(host: &dyn Host, cluster: &str) -> Option<ClusterSummary> {
    let bytes = host.shared_value(&summary_key(cluster))?;
    ClusterSummary::decode(&bytes).ok()
}
