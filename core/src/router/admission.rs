//! Whether a pool is saturated, for shedding sheddable requests.

use crate::config::AdmissionSettings;
use crate::scoring::Candidate;

/// Every pod is at or over a threshold. A pod without fresh signals counts as not
/// saturated: the gateway cannot see it, so it admits rather than refuse blindly.
pub fn pool_saturated(candidates: &[Candidate], settings: &AdmissionSettings) -> bool {
    !candidates.is_empty()
        && candidates.iter().all(|c| {
            c.kv_cache_usage
                .is_some_and(|kv| c.waiting >= settings.queue_depth_threshold || kv >= settings.kv_cache_threshold)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoring::candidate;

    #[test]
    fn saturated_only_when_every_pod_is_seen_and_over_a_threshold() {
        let settings = AdmissionSettings::default();
        let mut pods = vec![candidate(1, 5.0, 1.0, Some(0.1)), candidate(2, 0.0, 1.0, Some(0.85))];
        assert!(pool_saturated(&pods, &settings));
        pods[1].kv_cache_usage = Some(0.5);
        assert!(!pool_saturated(&pods, &settings), "pod 1 has room");
        pods[1].waiting = 9.0;
        pods[1].kv_cache_usage = None;
        assert!(!pool_saturated(&pods, &settings), "pod 1's signals are stale");
        assert!(!pool_saturated(&[], &settings));
    }
}
