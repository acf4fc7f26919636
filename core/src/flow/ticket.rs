//! What the gateway queue knows of a held request: enough to order it, bound it and
//! charge its tenant, and the id its holder resumes it by.

use serde::{Deserialize, Serialize};

use crate::config::Criticality;

/// Longest tenant name kept; a longer header value is cut (the name only groups
/// requests, so a cut name still does).
pub const MAX_TENANT_BYTES: usize = 128;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ticket {
    /// The holder's id for the request: its high 32 bits name the holder (the
    /// filter's worker), the low 32 the request (the filter's stream context id).
    pub id: u64,
    pub band: Criticality,
    /// From the configured tenant header; empty for requests without one.
    pub tenant: String,
    pub enqueued_ms: u64,
    /// Arrival plus the request's TTFT target, or plus its band's longest wait.
    pub deadline_ms: u64,
    /// Refused as expired from this time on.
    pub expires_ms: u64,
    /// Tokens charged to the tenant when dispatched: prompt plus expected output.
    pub cost_tokens: f64,
}

impl Ticket {
    /// A tenant name from a header value, cut at a character boundary.
    pub fn tenant_name(header: Option<&str>) -> String {
        let value = header.unwrap_or("").trim();
        let mut end = value.len().min(MAX_TENANT_BYTES);
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        value.get(..end).unwrap_or("").to_string()
    }
}
