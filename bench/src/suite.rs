//! The suites: `quick` for `make bench` (minutes), `full` for `make bench-full`.

use std::path::Path;

use crate::workloads::{
    Agentic, AgenticError, BurstyChat, Calibration, CalibrationCase, LoraVariant, MultiLora, MultiRoundChat,
    SharedPrefix, TraceError, TraceReplay, Workload,
};

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
            Box::new(Calibration::standard(CalibrationCase::Slow10x)),
            Box::new(Calibration::standard(CalibrationCase::Fast3x)),
            Box::new(Calibration::standard(CalibrationCase::ColdJoin)),
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
            Box::new(Calibration::standard(CalibrationCase::Slow10x)),
            Box::new(Calibration::standard(CalibrationCase::Fast3x)),
            Box::new(Calibration::standard(CalibrationCase::ColdJoin)),
        ],
    }
}

/// The trace `trace-replay` reads unless told otherwise, relative to the repository root
/// (see ../shared/traces/SOURCES.md).
pub const DEFAULT_TRACE: &str = "../shared/traces/mooncake-conversation.jsonl";

/// Replay speeds and window of `trace-replay` in each suite: from about half to about
/// 125% of the fleet's capacity, where routing decides who waits, not past it where
/// every policy drowns. The capacity is where round robin stops keeping up: over the
/// first 300 s of the conversation trace on the long-context engine model it served
/// 90% of the offered output at 2× (1,932 of 2,148 tokens/s) and 85% at 2.5×
/// (BENCHMARKS.md, "Trace replay"). The quick suite replays those 300 s (918 requests;
/// seconds for all policies), the full suite the whole hour (12,031 requests).
pub fn trace_plan(kind: SuiteKind) -> (Vec<f64>, Option<f64>) {
    let speeds = vec![1.0, 1.5, 2.0, 2.5];
    match kind {
        SuiteKind::Quick => (speeds, Some(300.0)),
        SuiteKind::Full => (speeds, None),
    }
}

/// `trace-replay` of the trace at `path` with the suite's plan, or the given speeds and
/// window (a window of 0 replays the whole trace).
pub fn trace_replay(
    kind: SuiteKind,
    path: &Path,
    speeds: Option<Vec<f64>>,
    window_s: Option<f64>,
) -> Result<TraceReplay, TraceError> {
    let (plan_speeds, plan_window) = trace_plan(kind);
    let window_s = match window_s {
        Some(w) if w > 0.0 => Some(w),
        Some(_) => None,
        None => plan_window,
    };
    TraceReplay::load(path, speeds.unwrap_or(plan_speeds), window_s)
}

/// The sessions `agentic` plays unless told otherwise, relative to the repository root
/// (see ../shared/traces/agentic/SOURCES.md).
pub const DEFAULT_AGENTIC: &str = "../shared/traces/agentic";

/// Sessions at once and the seconds calls are sent for, of `agentic` in each suite.
pub fn agentic_plan(kind: SuiteKind) -> (Vec<f64>, f64) {
    match kind {
        SuiteKind::Quick => (vec![8.0, 16.0, 32.0, 64.0], 1800.0),
        SuiteKind::Full => (vec![8.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0], 3600.0),
    }
}

/// Users start within this many seconds of the beginning.
const AGENTIC_STAGGER_S: f64 = 120.0;

/// `agentic` of the sessions in `dir` with the suite's plan, or the given session
/// counts and duration.
pub fn agentic(
    kind: SuiteKind,
    dir: &Path,
    sessions: Option<Vec<f64>>,
    duration_s: Option<f64>,
) -> Result<Agentic, AgenticError> {
    let (counts, duration) = agentic_plan(kind);
    Agentic::load(dir, sessions.unwrap_or(counts), duration_s.unwrap_or(duration), AGENTIC_STAGGER_S)
}

/// The seed of part 2's request set `set` of `workload` (set 0 is a single-set run's).
pub fn e2e_request_set_seed(workload: &str, seed: u64, set: u64) -> u64 {
    xxhash_rust::xxh64::xxh64(format!("{workload}-e2e").as_bytes(), seed + set)
}

/// Part 2's workloads, each with the sentence the report describes it by: bursty chat
/// scaled down, shared-prefix as published at its second load step, where the
/// discrete-event run shows routing matters most below saturation, and, given the
/// trace, its first [`E2E_TRACE_WINDOW_S`] seconds at [`E2E_TRACE_SPEED`]×.
pub fn e2e_workloads(trace: Option<TraceReplay>) -> Vec<(Box<dyn Workload>, String)> {
    let mut workloads: Vec<(Box<dyn Workload>, String)> = vec![
        (
            Box::new(e2e_workload()),
            "`bursty-chat` scaled down (4 pods at 60% base load, bursts of 5 s every 15 s over 30 s)".into(),
        ),
        (
            Box::new(SharedPrefix::published(vec![20.0], 15.0)),
            "`shared-prefix` as published (8 pods, 150 groups × 5 users, 6,000-token system prompts, 1,200-token questions, 192 output tokens) at 20 req/s for 15 s".into(),
        ),
    ];
    if let Some(trace) = trace {
        let described = format!(
            "`trace-replay` of {} (8 pods), its first {E2E_TRACE_WINDOW_S} s at {E2E_TRACE_SPEED}× ({} requests)",
            trace.path().display(),
            trace.replayed().count(),
        );
        workloads.push((Box::new(trace), described));
    }
    workloads
}

/// The names `--e2e-workloads` accepts.
pub const E2E_WORKLOAD_NAMES: [&str; 3] = ["bursty-chat", "shared-prefix", TraceReplay::NAME];

/// Part 2's replay of the trace: its first minute (162 requests of 13,600 prompt tokens
/// on average in the conversation trace) at twice its recorded rate, about 5.4 req/s,
/// where the discrete-event run gives round robin a TTFT p90 of 2.9 s, least_request
/// 3.3 s and infergate 1.9 s (1.0-1.7 s at 1×, 2.4-5.2 s at 3×).
pub const E2E_TRACE_SPEED: f64 = 2.0;
pub const E2E_TRACE_WINDOW_S: f64 = 60.0;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_part_2_names_are_the_part_2_workloads() {
        // Without a trace, every part-2 workload but the replay.
        let mut built: Vec<&str> = e2e_workloads(None).iter().map(|(w, _)| w.name()).collect();
        built.push(TraceReplay::NAME);
        assert_eq!(built, E2E_WORKLOAD_NAMES);
    }
}
