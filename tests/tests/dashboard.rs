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
