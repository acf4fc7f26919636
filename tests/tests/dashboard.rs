//! The Grafana dashboard queries only metrics that exist: every name in its PromQL is
//! exported by the real Envoy running the filter (`/stats/prometheus`) or by the real
//! agent (`/metrics`), and every name pattern matches at least one exported name.

use std::collections::BTreeSet;

use infergate_e2e::{Stack, StackSpec};
use serde_json::Value;

const DASHBOARD: &str = include_str!("../../deploy/grafana/infergate-dashboard.json");

/// Metric names a Prometheus exposition declares or samples (counters also by their
/// `_total` name, histograms by their series).
fn exported(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                names.insert(name.to_string());
                match kind {
                    "counter" => {
                        names.insert(format!("{name}_total"));
                    }
                    "histogram" => {
                        for suffix in ["_bucket", "_sum", "_count"] {
                            names.insert(format!("{name}{suffix}"));
                        }
                    }
                    _ => {}
                }
            }
        } else if !line.starts_with('#') {
            if let Some(name) = line.split(['{', ' ']).next().filter(|n| !n.is_empty()) {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// The metric names and `__name__=~"…"` patterns of one PromQL expression.
fn referenced(expr: &str) -> (Vec<String>, Vec<String>) {
    let mut patterns = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("__name__=~\"") {
        let tail = &rest[at + 11..];
        let end = tail.find('"').unwrap();
        patterns.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    let names = expr
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("infergate_") && !patterns.iter().any(|p| p.contains(w)))
        .map(String::from)
        .collect();
    (names, patterns)
}

/// `infergate_pool_.+_decisions`: a prefix, `.+`, a suffix (the only shape used).
fn matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once(".+") {
        Some((prefix, suffix)) => {
            name.len() > prefix.len() + suffix.len() && name.starts_with(prefix) && name.ends_with(suffix)
        }
        None => name == pattern,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_exported() {
    let stack = Stack::start(StackSpec::default()).await;
    assert_eq!(stack.chat("m", 1).await.status, 200);
    let envoy = stack.client().get(format!("{}/stats/prometheus", stack.admin_url)).send().await.unwrap();
    let agent = stack.client().get(format!("{}/metrics", stack.agent_url)).send().await.unwrap();
    let mut names = exported(&envoy.text().await.unwrap());
    names.extend(exported(&agent.text().await.unwrap()));
    let dashboard: Value = serde_json::from_str(DASHBOARD).unwrap();
    let mut checked = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let (plain, patterns) = referenced(expr);
            for name in plain {
                assert!(names.contains(&name), "panel {:?} queries {name}, which nothing exports", panel["title"]);
                checked += 1;
            }
            for pattern in patterns {
                assert!(names.iter().any(|n| matches(&pattern, n)), "no exported name matches {pattern}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} references checked");
}

/// The VM memory panel's figure after 40 requests, each on its own connection so that
/// every worker serves some (a worker reports when a request finds a new snapshot).
async fn vm_memory_after_traffic(workers: u32) -> u64 {
    let stack = Stack::start(StackSpec { envoy_concurrency: workers, ..StackSpec::default() }).await;
    let fresh_connections = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let url = format!("{}/v1/chat/completions", stack.gateway_url);
    for _ in 0..40 {
        let body = infergate_e2e::client::chat_body("m", "Hello there", 1).to_string();
        let response = fresh_connections.post(&url).header("content-type", "application/json").body(body);
        assert_eq!(response.send().await.unwrap().status(), 200);
    }
    stack.stat("infergate.vm.memory_bytes").await.unwrap_or(0)
}

/// `infergate.vm.memory_bytes` sums the worker VMs, so two workers show about twice
/// what one does. (Were each worker to set it to its own size, the figure would flip
/// between workers, and a one-page difference between them would read as growth.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vm_memory_gauge_sums_the_worker_vms() {
    let one = vm_memory_after_traffic(1).await;
    let two = vm_memory_after_traffic(2).await;
    assert!(one >= 1 << 20, "one worker VM reports {one} bytes");
    let ratio = two as f64 / one as f64;
    eprintln!("VM memory: one worker {one} bytes, two workers {two} bytes");
    assert!((1.7..=2.3).contains(&ratio), "two workers report {two} bytes, one {one}: {ratio:.2}x");
}
