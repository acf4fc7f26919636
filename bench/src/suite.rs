//! The suites: `quick` for `make bench` (minutes), `full` for `make bench-full`.

use crate::workloads::{BurstyChat, LoraVariant, MultiLora, MultiRoundChat, SharedPrefix, Workload};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SuiteKind {
    Quick,
    Full,
}

/// Fleet capacity of the bursty-chat fleet in conversations started per second, from a
/// saturation sweep (see BENCHMARKS.md).
pub const BURSTY_CAPACITY: f64 = 16.0;

pub fn workloads(kind: SuiteKind) -> Vec<Box<dyn Workload>> {
    match kind {
        SuiteKind::Quick => vec![
            Box::new(SharedPrefix::published(vec![5.0, 20.0, 40.0, 60.0], 15.0)),
            Box::new(MultiLora {
                variant: LoraVariant::PrefillHeavy,
                qps_steps: vec![20.0, 50.0, 80.0],
                duration_s: 15.0,
            }),
            Box::new(MultiLora {
                variant: LoraVariant::DecodeHeavy,
                qps_steps: vec![40.0, 90.0, 140.0],
                duration_s: 15.0,
            }),
            Box::new(MultiRoundChat { users: 64, rounds: 10, qps_steps: vec![10.0, 30.0, 60.0] }),
            Box::new(BurstyChat::published(BURSTY_CAPACITY, 120.0, vec![0.6])),
        ],
        SuiteKind::Full => vec![
            Box::new(SharedPrefix::published(vec![3.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0], 60.0)),
            Box::new(MultiLora {
                variant: LoraVariant::PrefillHeavy,
                qps_steps: vec![10.0, 30.0, 50.0, 70.0, 90.0],
                duration_s: 60.0,
            }),
            Box::new(MultiLora {
                variant: LoraVariant::DecodeHeavy,
                qps_steps: vec![30.0, 60.0, 90.0, 120.0, 150.0],
                duration_s: 60.0,
            }),
            Box::new(MultiRoundChat { users: 320, rounds: 10, qps_steps: vec![10.0, 20.0, 40.0, 60.0, 80.0] }),
            Box::new(BurstyChat::published(BURSTY_CAPACITY, 600.0, vec![0.4, 0.6, 0.8])),
        ],
    }
}

/// Part 2: `bursty-chat` scaled down for the HTTP fleet behind real Envoy — 4 pods at
/// the same 60% base load, bursts of 5 s every 15 s, 30 s of simulated time.
pub fn e2e_workload() -> BurstyChat {
    BurstyChat {
        pods: 4,
        capacity_conversations_per_s: BURSTY_CAPACITY / 2.0,
        duration_s: 30.0,
        base_loads: vec![0.6],
        period_s: 15.0,
        burst_s: 5.0,
    }
}
