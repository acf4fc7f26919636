//! The gateway queue of one pool. A request its pool cannot take without queueing at
//! an engine is held here instead, where it can be reordered, bounded and dropped
//! cheaply; it is released when a snapshot or a finished request makes room.
//!
//! The order is strict between priority bands (critical, standard, sheddable), fair
//! between the tenants of a band (attained service or round robin), and first come or
//! earliest deadline within a tenant. The state is plain data, serializable, so that
//! the workers of one Envoy share one queue through shared data; the filter, the
//! discrete-event benchmark and the tests all run this code.

mod queue;
mod refusal;
mod ticket;

pub use queue::{FlowQueue, Offer, holder_of};
pub use refusal::Refusal;
pub use ticket::Ticket;

#[cfg(test)]
mod tests;
