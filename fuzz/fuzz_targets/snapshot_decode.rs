//! A push to the control listener, a snapshot or a cluster's summary: decoded and
//! validated or refused, never a panic; what is accepted encodes and decodes to itself.
#![no_main]

use infergate_core::global::ClusterSummary;
use infergate_core::snapshot::Snapshot;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(snapshot) = Snapshot::decode(bytes) {
        let again = Snapshot::decode(&snapshot.encode().expect("an accepted snapshot encodes"));
        assert_eq!(again.ok().as_ref(), Some(&snapshot));
    }
    if let Ok(summary) = ClusterSummary::decode(bytes) {
        let again = ClusterSummary::decode(&summary.encode().expect("an accepted summary encodes"));
        assert_eq!(again.ok().as_ref(), Some(&summary));
        let _ = summary.is_stale(u64::MAX, 2_000);
    }
});
