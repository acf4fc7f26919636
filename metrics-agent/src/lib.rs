//! The metrics agent: scrapes every pod of every pool, normalizes each engine's metrics
//! into the snapshot's signals, and pushes the snapshot to each Envoy's control
//! listener.
#![forbid(unsafe_code)]

pub mod discovery;
pub mod engines;
pub mod exposition;
pub mod learn;
pub mod push;
pub mod scrape;
pub mod telemetry;
pub mod token;

pub use scrape::FleetScraper;
