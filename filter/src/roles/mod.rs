//! The four roles one module plays, by its plugin configuration's `role`, and the
//! skeleton the two client-facing ones share.

pub mod control;
pub mod front;
pub mod global;
pub mod router;
pub mod singleton;
