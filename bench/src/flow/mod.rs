//! Flow control in the discrete-event simulator: tenants of three priorities share
//! one pool through a minute of overload, behind four gates (no queue, a plain
//! first-come queue, the llm-d Router's flow control at its defaults, infergate's).
//! infergate's gate runs `infergate_core::flow::FlowQueue` and
//! `Router::route_or_hold`, the code the filter ships.

mod gates;
mod report;
mod sim;
mod workload;

pub use gates::{Action, GATES, Gate, World, build, infergate_settings};
pub use report::{FlowResult, GroupResult, attack_markdown, jain, markdown, max_min_shares, summarize};
pub use sim::{FlowOutcome, run};
pub use workload::{Attack, NOISY, QUIET, Tag, Tenants};

#[cfg(test)]
mod tests;
