//! How many requests go to the pod whose pinned metrics favour it, with the evidence
//! for each one that does not.
//!
//! With the parallel tests' stacks on 2 cores, a few decisions now and then saw pods
//! pinned as loaded as idle (`waiting=0 running=0 kv=0.00` on fresh signals), behind
//! the Wasm filter and the native picker alike. The pods' own text was right at
//! those moments and the agent logged nothing: the counts had started on a snapshot
//! scraped before every pin, because the wait before them only asked for one request
//! to reach the favoured pod. [`Stack::wait_for_favour`] waits for the pins to show,
//! and a count has one round. A stray is reported with its decision, what the pods'
//! `/metrics` said right after and the agent's last warnings, so that a failure
//! explains itself.

use std::collections::HashMap;
use std::fmt::Write;
use std::net::SocketAddr;
use std::time::Duration;

use infergate_core::wire::header::DECISION;

use crate::stack::Stack;

/// Requests in a row that must go to the favoured pod before a count starts.
const IN_A_ROW: usize = 10;

/// Strays described in full; later ones are only counted.
const STRAYS_DESCRIBED: usize = 3;

/// What [`Stack::count_favoured`] saw.
#[derive(Debug)]
pub struct FavouredCount {
    /// Whether the count reached the bound.
    pub met: bool,
    /// The pods and counts, and the strays' evidence.
    pub report: String,
}

impl Stack {
    /// Waits until requests go to `best` on a snapshot that already shows the other pods
    /// loaded: [`IN_A_ROW`] in a row, each decision's runner-up (when the client sees
    /// the decision: not behind ext_proc) reporting the queue [`Stack::favour`] pins. A
    /// request routed to `best` alone proves nothing: until the pins are scraped every
    /// pod is idle and a quarter of the requests go to `best` by chance, and a count
    /// started then sees the pods not yet scraped as idle (`waiting=0 running=0
    /// kv=0.00`, the strays this module was written to explain).
    pub async fn wait_for_favour(&self, best: SocketAddr, timeout: Duration) {
        let best_name = best.to_string();
        self.wait_until("routing to follow the pinned metrics", timeout, || async {
            for _ in 0..IN_A_ROW {
                let reply = self.chat("m", 1).await;
                let runner_up_loaded = match reply.header(DECISION) {
                    Some(decision) => decision
                        .split_once("runner_up=")
                        .is_some_and(|(_, runner_up)| runner_up.contains(" waiting=100 ")),
                    None => true,
                };
                if reply.served_by() != Some(best_name.as_str()) || !runner_up_loaded {
                    return false;
                }
            }
            true
        })
        .await;
    }

    /// Sends `requests` chats and counts those served by `best`: met with at least
    /// `at_least`.
    pub async fn count_favoured(&self, best: SocketAddr, requests: usize, at_least: usize) -> FavouredCount {
        let best_name = best.to_string();
        let mut report = String::new();
        let mut described = 0;
        let mut served: HashMap<String, usize> = HashMap::new();
        for _ in 0..requests {
            let reply = self.chat("m", 1).await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            let pod = reply.served_by().unwrap_or("none").to_string();
            if pod != best_name && described < STRAYS_DESCRIBED {
                described += 1;
                let decision = reply.header(DECISION).unwrap_or("-");
                let _ =
                    writeln!(report, "stray to {pod}: {decision}\n  pods' metrics now: {}", self.load_lines().await);
                let log = self.agent_log();
                let warnings: Vec<&str> =
                    log.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).rev().take(5).collect();
                let _ = writeln!(report, "  the agent's last warnings: {warnings:?}");
            }
            *served.entry(pod).or_insert(0) += 1;
        }
        let to_best = served.get(&best_name).copied().unwrap_or(0);
        let _ = writeln!(report, "{to_best}/{requests} to {best_name}; all: {served:?}");
        FavouredCount { met: to_best >= at_least, report }
    }

    /// Each pod's waiting, running and KV-use lines from its `/metrics`.
    async fn load_lines(&self) -> String {
        let mut out = String::new();
        for pod in &self.fleet.pods {
            let text = match self.client().get(format!("http://{pod}/metrics")).send().await {
                Ok(response) => response.text().await.unwrap_or_else(|e| format!("unreadable: {e}")),
                Err(e) => format!("no answer: {e}"),
            };
            // `vllm:num_requests_waiting{model_name="m"} 100` becomes `num_requests_waiting=100`.
            let load: Vec<String> = text
                .lines()
                .filter(|l| !l.starts_with('#'))
                .filter(|l| {
                    ["num_requests_waiting", "num_requests_running", "cache_usage_perc"].iter().any(|k| l.contains(k))
                })
                .filter_map(|l| {
                    let (series, value) = l.rsplit_once(' ')?;
                    let name = series.split('{').next()?.rsplit(':').next()?;
                    Some(format!("{name}={value}"))
                })
                .collect();
            let _ = write!(out, "[{pod}: {}] ", load.join(" "));
        }
        out
    }
}
