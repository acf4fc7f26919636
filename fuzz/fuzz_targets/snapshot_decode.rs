//! A snapshot push, as the control listener receives it: decoded and validated or
//! refused, never a panic; what is accepted encodes and decodes to itself.
#![no_main]

use infergate_core::snapshot::Snapshot;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(snapshot) = Snapshot::decode(bytes) {
        let again = Snapshot::decode(&snapshot.encode().expect("an accepted snapshot encodes"));
        assert_eq!(again.ok().as_ref(), Some(&snapshot));
    }
});
