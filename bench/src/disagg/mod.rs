//! Prefill/decode disaggregation in the discrete-event simulator.
//!
//! Why a simulator of its own: a split request lives on two pods and a link. Its
//! prefill leg runs on a prefill pod's engine with one output token; its KV cache then
//! moves to the decode pod over that pod's link (one transfer at a time per link); only
//! then does the decode leg enter the decode pod's engine, with the KV it brought
//! (`SimRequest::with_transferred_kv`), and the client's first token is the decode
//! leg's. The aggregated simulator (`des`) has one pod per request and no link, so it
//! cannot say what a split costs in TTFT or saves in inter-token latency.
//!
//! What is compared, on the same number of pods: aggregated fleets (every pod does
//! both) routed by infergate's router and by the leading aggregated peers, against the
//! same pods split into prefill and decode roles, routed by infergate's router with its
//! split rule `predicted`, `always` and `never` (the core code that ships, fed the
//! agent's scrapes) and by the peers' P/D policies re-implemented from their current
//! code (llm-d, vLLM's proxy, Dynamo, AIBrix, SGLang's gateway). Goodput counts the
//! requests that meet a TTFT and a per-request ITL objective.

mod chart;
pub mod e2e;
mod e2e_report;
mod fleet;
mod infergate_pd;
mod peers;
mod policy;
mod report;
mod sim;
mod summary;
mod workload;

pub use chart::goodput_chart;
pub use e2e_report::{Comparison, ITL_TOLERANCE, comparison_markdown};
pub use fleet::{LINK_GB_PER_S, Layout, Link, fleet_config};
pub use policy::{AGGREGATED, Aggregated, PdChoice, PdContext, PdFleet, PdPolicy, PolicyKind};
pub use report::markdown;
pub use sim::{PdOutcome, PdRun, legs_per_pod, run};
pub use summary::{PdResult, Slo, WorkloadRuns, meets, request_itl_p90_ms, summarize};
pub use workload::{GUIDE_OUTPUT_TOKENS, GUIDE_PROMPT_TOKENS, GuideShape, LONG_SHARE, MixedChat};

#[cfg(test)]
mod tests;
