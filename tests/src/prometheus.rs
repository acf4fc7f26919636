//! A real Prometheus for the tests of the dashboard's queries and the alert rules:
//! Debian's `prometheus` package (`make prometheus`), started on a config this module
//! writes, with its storage in a temp dir, on a free port, and killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::stack::free_port;

/// How often Prometheus scrapes and evaluates rules: fast, so a test waits seconds.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// One scrape job of one target.
#[derive(Debug, Clone)]
pub struct ScrapeTarget {
    pub job: &'static str,
    /// `host:port`.
    pub address: String,
    pub metrics_path: &'static str,
}

/// `prometheus` or `promtool` from the PATH; a test that needs one fails without it.
pub fn installed(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("`{tool}` is not installed; run `make prometheus` (Debian's prometheus package)"))
}

pub struct Prometheus {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    client: reqwest::Client,
    child: Child,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` and evaluating `rule_files` every
    /// [`INTERVAL`], and waits until it is ready.
    pub async fn start(targets: &[ScrapeTarget], rule_files: &[PathBuf]) -> Prometheus {
        let dir = tempfile::tempdir().expect("a temp dir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, config_yaml(targets, rule_files)).expect("write prometheus.yml");
        let listen = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("create a log file");
        let child = Command::new(installed("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={listen}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let prometheus = Prometheus { url: format!("http://{listen}"), client: reqwest::Client::new(), child, dir };
        let ready = format!("{}/-/ready", prometheus.url);
        prometheus
            .wait_until("Prometheus to become ready", Duration::from_secs(20), || async {
                prometheus.client.get(&ready).send().await.is_ok_and(|r| r.status().is_success())
            })
            .await;
        prometheus
    }

    /// `GET /api/v1/<path>`'s `data`, or Prometheus's error.
    async fn api(&self, path: &str, params: &[(&str, &str)]) -> Result<Value, String> {
        let url = format!("{}/api/v1/{path}", self.url);
        let response = self.client.get(url).query(params).send().await.map_err(|e| e.to_string())?;
        let body: Value = response.json().await.map_err(|e| e.to_string())?;
        if body["status"] == "success" { Ok(body["data"].clone()) } else { Err(body.to_string()) }
    }

    /// `GET /api/v1/<path>`'s `data` as a list; panics if Prometheus refused.
    async fn list(&self, path: &str, field: &str) -> Vec<Value> {
        let data = self.api(path, &[]).await.unwrap_or_else(|e| panic!("/api/v1/{path} failed: {e}"));
        let list = if field.is_empty() { &data } else { &data[field] };
        list.as_array().cloned().unwrap_or_default()
    }

    /// The series an instant query returns now, or why Prometheus refused it.
    pub async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.api("query", &[("query", expr)]).await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// Every rule group with its rules' health (`/api/v1/rules`).
    pub async fn rule_groups(&self) -> Vec<Value> {
        self.list("rules", "groups").await
    }

    /// Alerts pending or firing now (`/api/v1/alerts`).
    pub async fn alerts(&self) -> Vec<Value> {
        self.list("alerts", "alerts").await
    }

    /// Every metric name Prometheus holds.
    pub async fn metric_names(&self) -> Vec<String> {
        let names = self.list("label/__name__/values", "").await;
        names.iter().filter_map(Value::as_str).map(String::from).collect()
    }

    /// Every scrape target with its health and last error (`/api/v1/targets`).
    pub async fn targets(&self) -> Vec<Value> {
        self.list("targets", "activeTargets").await
    }

    /// Waits until each of `targets` has been scraped `count` times since now, so that
    /// what happened before this call is in `count` samples. `up`'s timestamp is its
    /// target's last scrape; scrapes are [`INTERVAL`] apart, but the first comes about
    /// 5 s after Prometheus starts (its discovery hands targets over at that pace).
    pub async fn wait_for_scrapes(&self, targets: usize, count: u32) {
        let since = unix_seconds() + INTERVAL.as_secs_f64() * f64::from(count.saturating_sub(1));
        self.wait_until("scrapes of every target", Duration::from_secs(15), || async {
            let scraped = self.query("timestamp(up)").await.unwrap_or_default();
            let after = scraped.iter().filter(|s| sample_value(s).is_some_and(|at| at > since)).count();
            after == targets
        })
        .await;
    }

    /// Waits until every rule group has been evaluated twice since now: the second
    /// evaluation began after this call.
    pub async fn wait_for_two_evaluations(&self) {
        let evaluated_at = |groups: Vec<Value>| -> Vec<String> {
            groups.iter().map(|g| g["lastEvaluation"].as_str().unwrap_or_default().to_string()).collect()
        };
        let mut seen = evaluated_at(self.rule_groups().await);
        let mut changes = vec![0; seen.len()];
        let deadline = Instant::now() + Duration::from_secs(10);
        while changes.iter().any(|&count| count < 2) {
            assert!(Instant::now() < deadline, "timed out waiting for two evaluations of every rule group");
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = evaluated_at(self.rule_groups().await);
            for ((before, after), count) in seen.iter_mut().zip(now).zip(changes.iter_mut()) {
                if *before != after {
                    *count += 1;
                    *before = after;
                }
            }
        }
    }

    async fn wait_until<F, Fut>(&self, what: &str, timeout: Duration, mut condition: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if condition().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("timed out after {timeout:?} waiting for {what}");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!("----- prometheus.log (last {} lines) -----", tail.len());
            tail.into_iter().rev().for_each(|line| eprintln!("{line}"));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An instant vector sample's value (`"value": [time, "text"]`).
pub fn sample_value(sample: &Value) -> Option<f64> {
    sample["value"].get(1)?.as_str()?.parse().ok()
}

fn unix_seconds() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// `prometheus.yml`: JSON, which YAML reads as it is.
fn config_yaml(targets: &[ScrapeTarget], rule_files: &[PathBuf]) -> String {
    let interval = format!("{}s", INTERVAL.as_secs());
    let jobs: Vec<Value> = targets
        .iter()
        .map(|t| {
            serde_json::json!({
                "job_name": t.job,
                "metrics_path": t.metrics_path,
                "static_configs": [{"targets": [t.address]}],
            })
        })
        .collect();
    let rules: Vec<String> = rule_files.iter().map(|p| absolute(p).display().to_string()).collect();
    serde_json::json!({
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "rule_files": rules,
        "scrape_configs": jobs,
    })
    .to_string()
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}
