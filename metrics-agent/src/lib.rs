//! The metrics agent: scrapes every pod of every pool, normalizes each engine's metrics
//! into the snapshot's signals, and pushes the snapshot to each Envoy's control
//! listener.
#![forbid(unsafe_code)]

//!
//! Without the default `runtime` feature only the Prometheus text parser, the engine
//! adapters and the rate learner are built: pure functions of a scrape, for fuzzing.

#[cfg(feature = "runtime")]
pub mod discovery;
pub mod engines;
pub mod exposition;
pub mod learn;
#[cfg(feature = "runtime")]
pub mod push;
#[cfg(feature = "runtime")]
pub mod scrape;
#[cfg(feature = "runtime")]
pub mod telemetry;
#[cfg(feature = "runtime")]
pub mod token;

#[cfg(feature = "runtime")]
pub use scrape::FleetScraper;
