//! What one routed request costs in crossings of the VM boundary: host calls and
//! stream callbacks, counted on the fake host (each is one call between Envoy and the
//! VM in the real one, which also enters the VM to create, finish and delete each
//! stream's context: three more per request, the same for every filter). BENCHMARKS.md's data-path section reports these counts; the
//! bounds keep a change from adding crossings unnoticed.

use std::collections::BTreeMap;

use crate::host::fake::STREAM_CALLBACK;
use crate::test_support::{
    Gateway, MODEL, PODS, first_endpoint, idle, pod, router_config_with, routing, snapshot, snapshot_with,
};
use infergate_core::config::{Disaggregation, SplitPolicy};
use infergate_core::wire::header;

/// A chat body of exactly `bytes` bytes (from a few hundred up).
fn body(bytes: usize) -> Vec<u8> {
    let with = |prompt: &str| {
        serde_json::to_vec(&serde_json::json!({
            "model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": prompt}],
        }))
        .unwrap_or_default()
    };
    let overhead = with("").len();
    let words = "the quick brown fox jumps over the lazy dog ".repeat(bytes / 44 + 1);
    with(words.get(..bytes.saturating_sub(overhead)).unwrap_or_default())
}

/// Routes one request of `bytes` bytes, sent in `chunk`-byte pieces, answers it with one
/// chunk and ends it; returns the crossings it took, by host method.
fn crossings(gateway: &Gateway, bytes: usize, chunk: usize) -> BTreeMap<&'static str, u64> {
    let body = body(bytes);
    let chunks: Vec<&[u8]> = body.chunks(chunk).collect();
    gateway.envoy.take_host_calls();
    let mut stream = gateway.routers[0].stream();
    stream.request("POST", "/v1/chat/completions", &[("content-type", "application/json")], &chunks);
    let chosen = stream.request_header(header::ENDPOINT).map(first_endpoint).unwrap_or_default();
    assert!(!chosen.is_empty(), "not routed: {:?}", stream.reply().map(|r| r.json()));
    stream.respond(&chosen, 200, "application/json", &[br#"{"choices":[]}"#]);
    stream.end();
    gateway.envoy.take_host_calls()
}

fn total(calls: &BTreeMap<&'static str, u64>) -> u64 {
    calls.values().sum()
}

#[test]
fn a_routed_request_crosses_into_the_vm_a_bounded_number_of_times() {
    let gateway = Gateway::new(1, false);
    assert_eq!(gateway.push_snapshot(&snapshot(1, gateway.envoy.now_ms(), &[idle(), idle(), idle()])), 204);
    // The first request on a worker adopts the snapshot: not the steady state.
    crossings(&gateway, 4096, 4096);
    let small = crossings(&gateway, 4096, 4096);
    let large = crossings(&gateway, 48 * 1024, 16 * 1024);
    eprintln!("4 KiB in one chunk: {} {small:?}", total(&small));
    eprintln!("48 KiB in 16 KiB chunks: {} {large:?}", total(&large));
    // Headers, one body chunk, response headers, response body, log.
    assert_eq!(small.get(STREAM_CALLBACK), Some(&5), "{small:?}");
    // Two more body chunks, each one callback and at most one read of the new bytes.
    assert_eq!(large.get(STREAM_CALLBACK), Some(&7), "{large:?}");
    assert!(large.get("request_body") <= small.get("request_body").map(|n| n + 2).as_ref(), "{large:?}");
    assert!(total(&small) <= SMALL_BOUND, "{} crossings: {small:?}", total(&small));
    assert!(total(&large) <= total(&small) + 4, "{} crossings: {large:?}", total(&large));
}

/// Crossings of a 4 KiB request today (2026-12-04: 5 callbacks and 24 host calls, 5 of
/// them shared-data reads, whatever the pool's size); lower it when a change saves some.
const SMALL_BOUND: u64 = 29;

/// A pool with prefill and decode pods whose decision keeps a request whole costs what
/// an aggregated pool's request does, and one counter more (`infergate.pd.whole`).
#[test]
fn a_request_a_disaggregated_pool_serves_whole_crosses_as_often_plus_its_counter() {
    let aggregated = Gateway::new(1, false);
    assert_eq!(aggregated.push_snapshot(&snapshot(1, aggregated.envoy.now_ms(), &[idle(), idle(), idle()])), 204);
    let mut pd = routing();
    pd.pools[0].disaggregation = Some(Disaggregation {
        split: SplitPolicy::Never,
        prefill_endpoints: vec![pod(PODS[0])],
        ..Disaggregation::default()
    });
    let whole = Gateway::with_router_config(1, &router_config_with(pd.clone(), false, true));
    assert_eq!(whole.push_snapshot(&snapshot_with(1, whole.envoy.now_ms(), &[idle(), idle(), idle()], pd)), 204);
    crossings(&aggregated, 4096, 4096);
    crossings(&whole, 4096, 4096);
    let before = crossings(&aggregated, 4096, 4096);
    let after = crossings(&whole, 4096, 4096);
    eprintln!("aggregated: {} {before:?}", total(&before));
    eprintln!("disaggregated, served whole: {} {after:?}", total(&after));
    let mut expected = before.clone();
    *expected.entry("increment_metric").or_default() += 1;
    assert_eq!(after, expected);
}
