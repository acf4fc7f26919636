//! `infergate-epp`: core's router as an endpoint picker (the Gateway API Inference
//! Extension's protocol over Envoy's ext_proc), for gateways that call an external
//! picker instead of loading the filter (Istio, agentgateway, kgateway, NGINX Gateway
//! Fabric, GKE). The same agent snapshots feed it, on the same control path and token.
//!
//! - `picker`: the router, its in-flight ledger and the snapshot they use, behind one lock.
//! - `exchange`: one request's ext_proc stream, from its headers to its end.
//! - `replies`: the ext_proc messages the picker answers with.
//! - `replicas`: what one picker tells the others when several serve one gateway.
//! - `control`: the snapshot and load push endpoints, `/metrics`, `/healthz`, `/readyz`.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

pub mod control;
pub mod exchange;
pub mod picker;
pub mod replicas;
pub mod replies;
pub mod service;
