//! The per-pod tables of one decision. The router keeps them between requests: each
//! decision clears and refills them, so they grow to the largest pool once and a
//! decision allocates no table of its own.

use crate::scoring::{Candidate, TtftBreakdown};

#[derive(Debug, Default)]
pub(super) struct PodTables {
    pub candidates: Vec<Candidate>,
    /// Whether each candidate's signals are fresh.
    pub fresh: Vec<bool>,
    /// Each candidate's predicted cost, in the predicted-ttft mode.
    pub breakdowns: Vec<TtftBreakdown>,
    /// Each candidate's score; higher is better.
    pub totals: Vec<f64>,
    /// One signal's scores, in the weighted mode.
    pub signal_column: Vec<f64>,
    /// Whether each candidate may be chosen (under the KV threshold).
    pub eligible: Vec<bool>,
    /// (total, tie-break, index) of the eligible candidates, for ranking.
    pub order: Vec<(f64, u64, usize)>,
    /// The candidates' endpoints and the prefix keys each holds, for the joint search.
    pub endpoints: Vec<crate::endpoint::Endpoint>,
    pub matched_keys: Vec<usize>,
}
