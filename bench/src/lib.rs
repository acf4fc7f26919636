//! infergate's benchmark: the model-sim engine driven in virtual time by each routing
//! policy — infergate's own router, the very code the Envoy filter runs, beside faithful
//! re-implementations of the peers' published policies — on the peers' published
//! workloads, with fixed seeds.

pub mod agent_scale;
pub mod calibration;
pub mod cli;
pub mod datapath;
pub mod des;
pub mod disagg;
pub mod e2e;
pub mod engine_runs;
pub mod fleet;
pub mod flow;
pub mod global;
pub mod inference_perf;
pub mod peers;
pub mod policies;
pub mod prefix_groups;
pub mod provenance;
pub mod report;
pub mod request;
pub mod results;
pub mod suite;
pub mod ttft_tail;
pub mod workloads;
