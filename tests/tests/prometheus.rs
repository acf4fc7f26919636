//! The Grafana dashboard and the alert rules in a real Prometheus, scraping a real
//! gateway (Envoy with the filter, `/stats/prometheus`) and the real agent (`/metrics`)
//! every second after traffic that succeeded and failed: every panel's query returns
//! series, every rule evaluates without error, and the alerts for what went wrong are
//! pending while those for what did not stay quiet. promtool checks the rules file and
//! runs its unit tests.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::future::join_all;
use infergate_e2e::artifacts::workspace_root;
use infergate_e2e::prometheus::{Prometheus, ScrapeTarget, installed};
use infergate_e2e::stack::TOKEN;
use infergate_e2e::{ModelSpec, Stack, StackSpec};
use serde_json::Value;

const DASHBOARD: &str = include_str!("../../deploy/grafana/infergate-dashboard.json");

fn rules_file() -> PathBuf {
    workspace_root().join("deploy/prometheus/infergate-alerts.yaml")
}

/// Grafana's built-in variables as it sets them for a few minutes' range at a 1 s
/// scrape interval (`$__rate_interval` is at least four scrape intervals).
const GRAFANA_VARIABLES: [(&str, &str); 4] =
    [("__rate_interval", "4s"), ("__interval_ms", "2000"), ("__interval", "2s"), ("__range", "5m")];

/// `expr` with Grafana's variables replaced; `Err` names one this test has no value for.
fn substitute(expr: &str) -> Result<String, String> {
    let mut out = expr.to_string();
    for (name, value) in GRAFANA_VARIABLES {
        out = out.replace(&format!("${{{name}}}"), value).replace(&format!("${name}"), value);
    }
    match out.find('$') {
        // `$1` in label_replace is PromQL's, not Grafana's.
        Some(at) if !out[at + 1..].starts_with(|c: char| c.is_ascii_digit()) => {
            Err(format!("no value for the variable at {:?}", &out[at..]))
        }
        _ => Ok(out),
    }
}

/// A gateway with two pools, its agent, and Prometheus scraping both, after traffic
/// of every kind a panel or an alert shows: 16 requests answered on pool `a` and one on
/// pool `b`; 4 more on `b` routed on stale signals while the agent was down, which its
/// pods answer with 500; 5 for a model nobody serves, which the filter refuses; and
/// pushes with a wrong token and with bytes that are no snapshot.
async fn observed_gateway() -> (Stack, Prometheus) {
    let spec = StackSpec {
        pools: vec![("a", 2), ("b", 2)],
        models: vec![ModelSpec::base("m", "a"), ModelSpec::base("n", "b")],
        ..StackSpec::default()
    };
    let mut stack = Stack::start(spec).await;
    let targets = [
        ScrapeTarget {
            job: "infergate-gateway",
            address: stack.admin_url.trim_start_matches("http://").to_string(),
            metrics_path: "/stats/prometheus",
        },
        ScrapeTarget {
            job: "infergate-agent",
            address: stack.agent_url.trim_start_matches("http://").to_string(),
            metrics_path: "/metrics",
        },
    ];
    let prometheus = Prometheus::start(&targets, &[rules_file()]).await;
    // Counters that exist before the traffic have a sample from before it.
    prometheus.wait_for_scrapes(targets.len(), 1).await;

    let answered = join_all((0..16).map(|_| stack.chat("m", 4))).await;
    assert!(answered.iter().all(|r| r.status == 200), "{:?}", answered.iter().map(|r| r.status).collect::<Vec<_>>());
    // A pool's stats appear with its first decision: one on pool b, scraped, so that
    // Prometheus sees the decisions after it as an increase.
    assert_eq!(stack.chat("n", 4).await.status, 200);
    prometheus.wait_for_scrapes(targets.len(), 1).await;
    for &pod in &stack.fleet.pods[2..] {
        stack.fault(pod, serde_json::json!({"error_rate": 1.0, "error_status": 500})).await;
    }
    stack.kill_agent();
    // Past the routing's signal_max_age_ms (1 s) without a snapshot: every pod is stale.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for _ in 0..4 {
        assert_eq!(stack.chat("n", 4).await.status, 500);
    }
    stack.start_agent().await;
    for _ in 0..5 {
        assert_eq!(stack.chat("no-such-model", 4).await.status, 404);
    }
    assert_eq!(stack.push_snapshot(Some("not-the-token"), b"x".to_vec()).await, 401);
    assert_eq!(stack.push_snapshot(Some(TOKEN), b"not a snapshot".to_vec()).await, 400);

    prometheus.wait_for_scrapes(targets.len(), 2).await;
    let down: Vec<Value> = prometheus.targets().await.into_iter().filter(|t| t["health"] != "up").collect();
    assert!(down.is_empty(), "Prometheus cannot scrape: {down:?}");
    (stack, prometheus)
}

/// What `query` returns once it returns series, or at `deadline`; an error at once.
async fn series_by(prometheus: &Prometheus, query: &str, deadline: Instant) -> Result<Vec<Value>, String> {
    loop {
        let series = prometheus.query(query).await?;
        if !series.is_empty() || Instant::now() >= deadline {
            return Ok(series);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_returns_series_in_prometheus() {
    let (_stack, prometheus) = observed_gateway().await;
    let dashboard: Value = serde_json::from_str(DASHBOARD).unwrap();
    // Subqueries (the per-pool panels) step at 5 s boundaries: a rate over them needs
    // two steps with samples, which can be 10 s after the first scrape of a pool's stats.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut failures = Vec::new();
    let mut queried = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let result = match substitute(expr) {
                Ok(query) => series_by(&prometheus, &query, deadline).await,
                Err(why) => Err(why),
            };
            queried += 1;
            match result {
                Ok(series) if series.is_empty() => failures.push(format!("{}: {expr}: no series", panel["title"])),
                Ok(series) => eprintln!("{}: {} series: {expr}", panel["title"], series.len()),
                Err(error) => failures.push(format!("{}: {expr}: {error}", panel["title"])),
            }
        }
    }
    assert!(failures.is_empty(), "{} of {queried} queries failed:\n{}", failures.len(), failures.join("\n"));
    assert!(queried >= 30, "only {queried} queries in the dashboard");
}

/// The names of the metrics a rule expression reads: words of `infergate_` or `envoy_`
/// outside quoted strings that are not label names (followed by `=`, `!=`, `=~`, `!~`),
/// and the `__name__=~"…"` patterns.
fn rule_metrics(expr: &str) -> (Vec<String>, Vec<String>) {
    let patterns = expr.split("__name__=~\"").skip(1).filter_map(|rest| rest.split('"').next()).map(String::from);
    let unquoted: String = expr.split('"').step_by(2).collect::<Vec<_>>().join("\"\"");
    let mut names = Vec::new();
    let mut rest = unquoted.as_str();
    while let Some(start) = rest.find(|c: char| c.is_ascii_alphabetic() || c == '_') {
        let word_and_after = &rest[start..];
        let end =
            word_and_after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(word_and_after.len());
        let (word, after) = word_and_after.split_at(end);
        let is_label = after.trim_start().starts_with(['=', '!']);
        if !is_label && (word.starts_with("infergate_") || word.starts_with("envoy_")) {
            names.push(word.to_string());
        }
        rest = after;
    }
    (names, patterns.collect())
}

fn alert_names(alerts: &[Value], state: &str) -> BTreeSet<String> {
    alerts
        .iter()
        .filter(|a| a["state"] == state)
        .filter_map(|a| a["labels"]["alertname"].as_str())
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alert_rules_read_real_metrics_and_catch_what_went_wrong() {
    let (_stack, prometheus) = observed_gateway().await;
    prometheus.wait_for_two_evaluations().await;

    // Every metric a rule reads is one Prometheus scraped.
    let scraped: BTreeSet<String> = prometheus.metric_names().await.into_iter().collect();
    let groups = prometheus.rule_groups().await;
    let rules: Vec<&Value> = groups.iter().flat_map(|g| g["rules"].as_array().unwrap()).collect();
    let in_file = std::fs::read_to_string(rules_file()).unwrap();
    let alerts_in_file = in_file.lines().filter(|l| l.trim_start().starts_with("- alert:")).count();
    assert_eq!(rules.len(), alerts_in_file, "Prometheus loaded {} of the file's alerts", rules.len());
    for rule in &rules {
        let (name, expr) = (&rule["name"], rule["query"].as_str().unwrap());
        assert_eq!(rule["health"], "ok", "{name} does not evaluate: {}", rule["lastError"]);
        let (names, patterns) = rule_metrics(expr);
        for metric in names {
            assert!(scraped.contains(&metric), "{name} reads {metric}, which nothing exports");
        }
        for pattern in patterns {
            let matched = prometheus.query(&format!("count({{__name__=~\"{pattern}\"}})")).await.unwrap();
            assert!(!matched.is_empty(), "{name} reads {pattern}, which matches no exported metric");
        }
    }

    // Each rule is `for:` a minute or more, so what went wrong is pending, not firing.
    let alerts = prometheus.alerts().await;
    let pending = alert_names(&alerts, "pending");
    eprintln!("pending: {pending:?}");
    assert!(alert_names(&alerts, "firing").is_empty(), "{alerts:?}");
    for expected in [
        "InfergateGatewayErrorRatioHigh",
        "InfergateGatewayRejectionRatioHigh",
        "InfergatePoolAllPodsStale",
        "InfergateControlUnauthorized",
        "InfergateSnapshotInvalid",
    ] {
        assert!(pending.contains(expected), "{expected} is not pending: {alerts:?}");
    }
    let stale = alerts.iter().find(|a| a["labels"]["alertname"] == "InfergatePoolAllPodsStale").unwrap();
    assert_eq!(stale["labels"]["pool"], "b", "{stale}");
    // Not InfergatePodScrapesFailing: on two busy cores the test agent's 40 ms scrape
    // timeout fails now and then.
    let quiet = [
        "InfergateSnapshotStale",
        "InfergateNoSnapshotAccepted",
        "InfergateAgentDown",
        "InfergateAgentAbsent",
        "InfergateAgentPushesFailing",
        "InfergateGatewayDown",
        "InfergateAgentNoPods",
        "InfergateAgentNoGateways",
        "InfergateFlowQueueExpiring",
        "InfergateFlowQueueFull",
    ];
    for alert in quiet {
        assert!(!pending.contains(alert), "{alert} is pending on a gateway and agent that work: {alerts:?}");
    }
}

/// Runs promtool with `args` in the rules' directory; its output on failure.
fn promtool(args: &[&str]) {
    let dir = workspace_root().join("deploy/prometheus");
    let output = Command::new(installed("promtool")).args(args).current_dir(&dir).output().expect("run promtool");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "promtool {} failed:\n{text}", args.join(" "));
    eprintln!("promtool {}:\n{text}", args.join(" "));
}

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests_pass() {
    promtool(&["check", "rules", "infergate-alerts.yaml"]);
    promtool(&["test", "rules", "infergate-alerts.test.yaml"]);
}
