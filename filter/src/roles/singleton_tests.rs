use infergate_core::wire::{path, shared_data};

use crate::host::fake::take_logs;
use crate::shared::generation;
use crate::test_support::{Gateway, VM_ID, idle, push, singleton_config, snapshot};

fn generation_of(gateway: &Gateway) -> u64 {
    gateway.envoy.shared_value(shared_data::GENERATION).map_or(0, |b| generation::decode(&b))
}

#[test]
fn only_the_newest_of_several_queued_snapshots_is_published() {
    let gateway = Gateway::new(0, false);
    let now = gateway.envoy.now_ms();
    let newest = snapshot(3, now, &[idle()]);
    for bytes in [snapshot(1, now, &[idle()]), snapshot(2, now, &[idle()]), newest.clone()] {
        push(&gateway.control, path::SNAPSHOT, &bytes);
    }
    assert_eq!(gateway.envoy.deliver(), 1, "one wake-up for three pushes");
    assert_eq!(gateway.envoy.shared_value(shared_data::SNAPSHOT), Some(newest));
    assert_eq!(generation_of(&gateway), 1);
}

#[test]
fn a_restarted_singleton_continues_the_generation() {
    let gateway = Gateway::new(0, false);
    assert_eq!(gateway.push_snapshot(&snapshot(1, 0, &[idle()])), 204);
    assert_eq!(gateway.push_snapshot(&snapshot(2, 0, &[idle()])), 204);
    gateway.singleton.tear_down();
    let _restarted = gateway.envoy.start(VM_ID, &singleton_config());
    assert_eq!(gateway.push_snapshot(&snapshot(3, 0, &[idle()])), 204);
    assert_eq!(generation_of(&gateway), 3, "workers never see the counter go back");
}

#[test]
fn a_snapshot_that_cannot_be_stored_bumps_no_generation() {
    let gateway = Gateway::new(0, false);
    gateway.envoy.fail("set_shared_data");
    take_logs();
    // The control listener admits it (the sequence claim is best effort)...
    assert_eq!(gateway.push_snapshot(&snapshot(1, 0, &[idle()])), 204);
    // ...but the singleton cannot store it: readers keep what they have.
    assert!(take_logs().iter().any(|l| l.contains("cannot store snapshot")));
    gateway.envoy.heal("set_shared_data");
    assert_eq!(generation_of(&gateway), 0);
}

#[test]
fn a_singleton_that_cannot_register_its_queue_does_not_start() {
    let gateway = Gateway::new(0, false);
    gateway.envoy.fail("register_queue");
    take_logs();
    let second = gateway.envoy.start("other-vm", &singleton_config());
    assert!(!second.configured());
    assert!(take_logs().iter().any(|l| l.contains("cannot register queue infergate.snapshots")));
}
