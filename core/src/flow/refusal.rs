//! Why the gateway queue answered a request instead of releasing it, and the answer.

use crate::api_error::ApiError;
use crate::config::Criticality;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The queue was full and nothing held had less claim to a place.
    QueueFull,
    /// A request with more claim to a place took this one's.
    Displaced,
    /// Held for its band's longest wait.
    Expired,
}

impl Refusal {
    /// The reason as a header value and metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::Displaced => "displaced",
            Self::Expired => "expired",
        }
    }

    /// The reason of an answer made by [`Self::answer`], for its reason header.
    pub fn reason_of(error: &ApiError) -> Option<&'static str> {
        [Self::QueueFull, Self::Displaced, Self::Expired].into_iter().map(Self::as_str).find(|r| *r == error.code)
    }

    /// 429 for a sheddable request (the client should back off), 503 for the others
    /// (the service could not serve it in time), both with `Retry-After`.
    pub fn answer(self, band: Criticality, pool: &str, retry_after_s: u32) -> ApiError {
        let why = match self {
            Self::QueueFull => "its gateway queue is full",
            Self::Displaced => {
                "a request of higher priority or of a quieter tenant took its place in the gateway queue"
            }
            Self::Expired => "it waited in the gateway queue for its priority's longest wait",
        };
        let message = format!("Pool `{pool}` is saturated and {why}; retry in {retry_after_s} s.");
        match band {
            Criticality::Sheddable => ApiError::queue_refused(429, self.as_str(), message, retry_after_s),
            Criticality::Standard | Criticality::Critical => {
                ApiError::queue_refused(503, self.as_str(), message, retry_after_s)
            }
        }
    }
}
