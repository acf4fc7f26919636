use infergate_core::config::Criticality;

use super::*;
use crate::fleet::FleetConfig;

/// 5 s calm, 25 s at 1.5x, 5 s calm: enough to fill the queue, quick to run.
fn short_overload() -> Tenants {
    Tenants { phases: vec![(5.0, 0.5), (30.0, 1.5), (35.0, 0.5)], ..Tenants::overload(70.0) }
}

fn fleet() -> FleetConfig {
    let mut fleet = FleetConfig::new(4, &[]);
    fleet.routing.models[0].criticality = Criticality::Critical;
    fleet
}

fn outcomes(gate: &str, seed: u64) -> (Vec<FlowOutcome>, Vec<Tag>) {
    let (scenario, tags) = short_overload().scenario(seed);
    let fleet = fleet();
    let mut gate = build(gate, &fleet, seed, &infergate_settings()).unwrap();
    (run(&scenario, &tags, &fleet, gate.as_mut()), tags)
}

#[test]
fn every_request_is_answered_or_refused_and_none_waits_past_its_band_bound() {
    for gate in GATES {
        let (outcomes, tags) = outcomes(gate, 3);
        for (o, tag) in outcomes.iter().zip(&tags) {
            assert!(
                o.finished.is_some() != o.refused.is_some(),
                "{gate}: a request neither finished nor refused, or both: {o:?}"
            );
            if gate == "infergate" {
                let bound = infergate_settings().band(tag.band).max_wait_ms as f64;
                // Expiry is checked on each tick (10 ms).
                assert!(o.queued_ms().unwrap_or(0.0) <= bound + 10.0, "{tag:?} held {o:?}");
            }
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_outcomes() {
    assert_eq!(outcomes("infergate", 5).0, outcomes("infergate", 5).0);
    assert_eq!(outcomes("llmd_flow_control", 5).0, outcomes("llmd_flow_control", 5).0);
}

#[test]
fn under_overload_infergate_keeps_critical_and_quiet_tenants_fast_where_no_queue_does_not() {
    let (scenario, _) = short_overload().scenario(3);
    let summary = |gate: &str| {
        let (outcomes, tags) = outcomes(gate, 3);
        summarize(gate, &outcomes, &tags, scenario.duration_s)
    };
    let (ours, none) = (summary("infergate"), summary("no_queue"));
    let p90 = |r: &FlowResult, class: &str| r.classes[class].ttft_p90_ms;
    assert!(p90(&ours, "critical") * 5.0 < p90(&none, "critical"), "{ours:?}\n{none:?}");
    let quiet = |r: &FlowResult| r.tenants[QUIET[0]].attainment();
    assert!(quiet(&ours) > 0.95 && quiet(&none) < 0.9, "{} vs {}", quiet(&ours), quiet(&none));
    assert!(ours.jain_standard > none.jain_standard, "{} vs {}", ours.jain_standard, none.jain_standard);
    // The noisy tenant pays for its own burst.
    assert!(ours.tenants[NOISY].attainment() < quiet(&ours));
}
