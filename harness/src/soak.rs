//! The soak: hours-long load at 70% of the simulated fleet's capacity through real Envoy
//! with the agent running, sampling memory and errors. `make soak` runs 30 minutes;
//! `tests/tests/soak.rs` runs 2 in `make test`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::{Mutex, Semaphore};

use crate::procfs::rss_mib;
use crate::{Stack, StackSpec};

/// The share of the measured capacity offered during the soak.
pub const LOAD_SHARE: f64 = 0.7;
/// Memory growth after warm-up that fails the soak.
pub const MAX_GROWTH: f64 = 0.05;
/// Requests in flight at most; beyond it the offered load is not kept up.
const MAX_OUTSTANDING: usize = 512;

#[derive(Debug, Clone)]
pub struct Sample {
    pub at_s: f64,
    pub envoy_rss_mib: f64,
    /// What Envoy's allocator has handed out (admin `/memory`), without its caches.
    pub envoy_allocated_mib: f64,
    /// The worker VMs' linear memory, summed (each adds its growth on a new snapshot).
    pub vm_memory_mib: f64,
    pub agent_rss_mib: f64,
    /// The snapshot in Envoy's shared data; besides it, 16 bytes per pod of load keys.
    pub snapshot_bytes: u64,
    pub requests: u64,
    pub errors: u64,
}

/// One sampled figure, to compare its values over the run.
pub type Figure = fn(&Sample) -> f64;

#[derive(Debug, Clone)]
pub struct Report {
    pub capacity_rps: f64,
    pub offered_rps: f64,
    pub samples: Vec<Sample>,
    pub first_errors: Vec<String>,
}

impl Report {
    pub fn errors(&self) -> u64 {
        self.samples.last().map_or(0, |s| s.errors)
    }

    pub fn requests(&self) -> u64 {
        self.samples.last().map_or(0, |s| s.requests)
    }

    /// Growth of a figure after warm-up (the first quarter of the run): the largest
    /// later value over the value when warm-up ended, minus one.
    pub fn growth_after_warmup(&self, figure: Figure) -> f64 {
        let end = self.samples.last().map_or(0.0, |s| s.at_s);
        let mut after = self.samples.iter().filter(|s| s.at_s >= end / 4.0);
        let Some(base) = after.next().map(figure).filter(|v| *v > 0.0) else { return 0.0 };
        after.map(figure).fold(base, f64::max) / base - 1.0
    }

    /// Why the run fails the soak's bar (any error; memory growth of 5% or more after
    /// warm-up in Envoy's RSS or allocated memory, the VM, or the agent); empty if it
    /// passes.
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        if self.errors() > 0 {
            failures.push(format!("{} errors, first: {:?}", self.errors(), self.first_errors));
        }
        let figures: [(&str, Figure); 4] = [
            ("Envoy RSS", |s| s.envoy_rss_mib),
            // RSS hides a slow leak behind the allocator's caches; this does not.
            ("Envoy allocated memory", |s| s.envoy_allocated_mib),
            ("wasm VM memory", |s| s.vm_memory_mib),
            ("agent RSS", |s| s.agent_rss_mib),
        ];
        for (name, figure) in figures {
            let growth = self.growth_after_warmup(figure);
            if growth >= MAX_GROWTH {
                failures.push(format!("{name} grew {:.1}% after warm-up", growth * 100.0));
            }
        }
        failures
    }

    pub fn markdown(&self) -> String {
        let mut out = format!(
            "capacity {:.1} req/s (closed loop, 32 clients); offered {:.1} req/s ({:.0}%)\n\n",
            self.capacity_rps,
            self.offered_rps,
            LOAD_SHARE * 100.0
        );
        out.push_str("| t (s) | Envoy RSS (MiB) | Envoy allocated (MiB) | wasm VM memory (MiB) | agent RSS (MiB) | snapshot (bytes) | requests | errors |\n");
        out.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for s in &self.samples {
            let _ = writeln!(
                out,
                "| {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {} |",
                s.at_s,
                s.envoy_rss_mib,
                s.envoy_allocated_mib,
                s.vm_memory_mib,
                s.agent_rss_mib,
                s.snapshot_bytes,
                s.requests,
                s.errors
            );
        }
        let _ = writeln!(
            out,
            "\ngrowth after warm-up: Envoy RSS {:+.1}% (allocated {:+.1}%), wasm VM memory {:+.1}%, agent RSS {:+.1}%",
            100.0 * self.growth_after_warmup(|s| s.envoy_rss_mib),
            100.0 * self.growth_after_warmup(|s| s.envoy_allocated_mib),
            100.0 * self.growth_after_warmup(|s| s.vm_memory_mib),
            100.0 * self.growth_after_warmup(|s| s.agent_rss_mib),
        );
        out
    }
}

/// A chat turn of one of 16 conversations, with a new question: shared prefixes, as in
/// production, and a prompt no request repeats.
fn body(n: u64) -> serde_json::Value {
    let conversation = n % 16;
    let system = format!("Conversation {conversation}: you answer questions about GPU serving. ").repeat(8);
    json!({"model": "m", "max_tokens": 16, "messages": [
        {"role": "system", "content": system},
        {"role": "user", "content": format!("question {n}")},
    ]})
}

async fn one(client: &reqwest::Client, url: &str, n: u64) -> Result<(), String> {
    let response = client.post(url).json(&body(n)).send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.text().await.map_err(|e| e.to_string())?;
    if status.is_success() { Ok(()) } else { Err(format!("{status}: {text}")) }
}

/// Completed requests per second with 32 clients in a closed loop.
async fn capacity(client: &reqwest::Client, url: &str, seconds: f64) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let clients: Vec<_> = (0..32u64)
        .map(|c| {
            let (client, url, done) = (client.clone(), url.to_string(), Arc::clone(&done));
            tokio::spawn(async move {
                let mut n = c << 32;
                while Instant::now() < deadline {
                    if one(&client, &url, n).await.is_ok() {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
            })
        })
        .collect();
    for c in clients {
        let _ = c.await;
    }
    done.load(Ordering::Relaxed) as f64 / seconds
}

/// Bytes Envoy's allocator has handed out, from the admin `/memory` endpoint.
async fn envoy_allocated_mib(stack: &Stack) -> f64 {
    let memory: serde_json::Value = match stack.client().get(format!("{}/memory", stack.admin_url)).send().await {
        Ok(response) => response.json().await.unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    };
    memory["allocated"].as_str().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / (1024.0 * 1024.0)
}

async fn agent_snapshot_bytes(stack: &Stack) -> u64 {
    let text = match stack.client().get(format!("{}/metrics", stack.agent_url)).send().await {
        Ok(response) => response.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    text.lines()
        .find_map(|l| l.strip_prefix("infergate_agent_snapshot_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Runs the soak on a fresh default stack (4 simulated pods, 2 Envoy workers).
pub async fn run(duration: Duration, sample_every: Duration) -> Report {
    let stack = Stack::start(StackSpec { access_log: false, ..StackSpec::default() }).await;
    let client = reqwest::Client::builder().pool_max_idle_per_host(MAX_OUTSTANDING).build().expect("a client");
    let url = format!("{}/v1/chat/completions", stack.gateway_url);
    let capacity_rps = capacity(&client, &url, 5.0).await;
    let offered_rps = (capacity_rps * LOAD_SHARE).max(1.0);
    let requests = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let first_errors = Arc::new(Mutex::new(Vec::new()));
    let outstanding = Arc::new(Semaphore::new(MAX_OUTSTANDING));
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut next_sample = sample_every;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / offered_rps));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut n = 0u64;
    while started.elapsed() < duration {
        tick.tick().await;
        n += 1;
        let Ok(permit) = Arc::clone(&outstanding).acquire_owned().await else { break };
        let (client, url) = (client.clone(), url.clone());
        let (done, failed, first) = (Arc::clone(&requests), Arc::clone(&errors), Arc::clone(&first_errors));
        tokio::spawn(async move {
            let result = one(&client, &url, n).await;
            done.fetch_add(1, Ordering::Relaxed);
            if let Err(error) = result {
                failed.fetch_add(1, Ordering::Relaxed);
                let mut first = first.lock().await;
                if first.len() < 5 {
                    first.push(error);
                }
            }
            drop(permit);
        });
        if started.elapsed() >= next_sample {
            next_sample += sample_every;
            let vm = stack.stat("infergate.vm.memory_bytes").await.unwrap_or(0);
            samples.push(Sample {
                at_s: started.elapsed().as_secs_f64(),
                envoy_rss_mib: stack.envoy_pid().and_then(rss_mib).unwrap_or(0.0),
                envoy_allocated_mib: envoy_allocated_mib(&stack).await,
                vm_memory_mib: vm as f64 / (1024.0 * 1024.0),
                agent_rss_mib: stack.agent_pid().and_then(rss_mib).unwrap_or(0.0),
                snapshot_bytes: agent_snapshot_bytes(&stack).await,
                requests: requests.load(Ordering::Relaxed),
                errors: errors.load(Ordering::Relaxed),
            });
        }
    }
    // Let the last requests finish before the final count.
    let _ = outstanding.acquire_many(MAX_OUTSTANDING as u32).await;
    if let Some(last) = samples.last_mut() {
        last.requests = requests.load(Ordering::Relaxed);
        last.errors = errors.load(Ordering::Relaxed);
    }
    let first_errors = first_errors.lock().await.clone();
    Report { capacity_rps, offered_rps, samples, first_errors }
}
