//! The metrics agent: scrapes every pod of every pool, normalizes each engine's metrics
//! into the snapshot's signals, and pushes the snapshot to each Envoy's control
//! listener.
//!
//! What a scrape's text says (the Prometheus parser, the engine adapters, the rate
//! learner) is `infergate-signals`; this crate is the I/O around it: discovery,
//! scraping, pushing and the agent's own telemetry.
#![forbid(unsafe_code)]

pub mod adapter_lists;
pub mod discovery;
pub mod load_exchange;
pub mod push;
pub mod replicas;
pub mod scrape;
pub mod telemetry;
pub mod token;

pub use scrape::FleetScraper;
