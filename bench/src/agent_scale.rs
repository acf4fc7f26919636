//! The agent at fleet scale: one real `metrics-agent` process scraping N simulated pods
//! (real HTTP, vLLM V1 metrics text) every 100 ms and pushing to real Envoy. Measures
//! the agent's CPU per pod and memory, the snapshot size, and how long a pod's metric
//! change takes to steer routing in Envoy.
//!
//! The change is observed where it matters, in routing decisions: every pod but one
//! reports a queue, the chosen pod is made idle at `t0`, and the bench sends one
//! request at a time through Envoy until one is served by that pod. The figure thus
//! covers the next scrape, the push and the filter adopting the snapshot; it
//! overstates the truth by up to one request's time (a few milliseconds here).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use infergate_harness::{ModelSpec, Stack, StackSpec};
use infergate_model_sim::engine::EngineProfile;

use infergate_harness::procfs::{cpu_seconds, rss_mib};

pub const SCRAPE_INTERVAL_MS: u64 = 100;

#[derive(Debug, Clone)]
pub struct ScaleResult {
    pub pods: usize,
    /// CPU seconds per second (1.0 = one core) over the steady window.
    pub agent_cores: f64,
    pub agent_rss_mib: f64,
    pub snapshot_bytes: u64,
    pub scrapes_per_s: f64,
    pub change_p50_ms: f64,
    pub change_p99_ms: f64,
    pub change_max_ms: f64,
    pub trials: u64,
    pub missed: u64,
}

async fn agent_metric(stack: &Stack, name: &str) -> Option<f64> {
    let text = stack.client().get(format!("{}/metrics", stack.agent_url)).send().await.ok()?.text().await.ok()?;
    text.lines().find(|l| l.starts_with(name)).and_then(|l| l.split_whitespace().last()).and_then(|v| v.parse().ok())
}

pub async fn run(pods: usize, window: Duration, trials: u64) -> Result<ScaleResult, String> {
    let stack = Stack::start(StackSpec {
        pools: vec![("fleet", pods)],
        models: vec![ModelSpec::base("m", "fleet")],
        profile: EngineProfile::TINY,
        scrape_interval_ms: SCRAPE_INTERVAL_MS,
        access_log: false,
        ..StackSpec::default()
    })
    .await;
    let pid = stack.agent_pid().ok_or("the agent is not running")?;
    // Every pod reports a queue, so that an idle pod is the clear choice.
    let all: Vec<SocketAddr> = stack.fleet.pods.clone();
    for &pod in &all {
        stack.pin(pod, 8.0, 4.0, 0.5).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    let before = (cpu_seconds(pid).ok_or("cannot read the agent's CPU time")?, Instant::now());
    let snapshots_before = agent_metric(&stack, "infergate_agent_snapshots_total").await.unwrap_or(0.0);
    tokio::time::sleep(window).await;
    let cpu = cpu_seconds(pid).ok_or("cannot read the agent's CPU time")? - before.0;
    let elapsed = before.1.elapsed().as_secs_f64();
    let snapshots = agent_metric(&stack, "infergate_agent_snapshots_total").await.unwrap_or(0.0) - snapshots_before;
    let rss = rss_mib(pid).unwrap_or(f64::NAN);
    let snapshot_bytes = agent_metric(&stack, "infergate_agent_snapshot_bytes").await.unwrap_or(0.0) as u64;

    let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).map_err(|e| e.to_string())?;
    let mut missed = 0;
    let mut previous: Option<SocketAddr> = None;
    let mut rng = fastrand::Rng::with_seed(42);
    for trial in 0..trials {
        let target = all[(trial as usize * 7919 + 13) % all.len()];
        if let Some(previous) = previous {
            stack.pin(previous, 8.0, 4.0, 0.5).await;
        }
        // Let the previous pod's queue be seen again, so only the target is idle; the
        // random part keeps the change from falling at the same phase of the agent's
        // cycle every time (detection happens just after a push, so a fixed pause
        // would always change the metric just after a scrape).
        let pause = 3 * SCRAPE_INTERVAL_MS + rng.u64(0..SCRAPE_INTERVAL_MS);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        stack.pin(target, 0.0, 0.0, 0.0).await;
        let changed = Instant::now();
        let deadline = changed + Duration::from_secs(5);
        let expected = target.to_string();
        loop {
            let reply = stack.chat("m", 1).await;

            if reply.served_by() == Some(expected.as_str()) {
                let _ = latencies.record(changed.elapsed().as_micros() as u64);
                break;
            }
            if Instant::now() > deadline {
                missed += 1;
                break;
            }
        }
        previous = Some(target);
    }
    let ms = |q: f64| latencies.value_at_quantile(q) as f64 / 1000.0;
    Ok(ScaleResult {
        pods,
        agent_cores: cpu / elapsed,
        agent_rss_mib: rss,
        snapshot_bytes,
        scrapes_per_s: snapshots * pods as f64 / elapsed,
        change_p50_ms: ms(0.5),
        change_p99_ms: ms(0.99),
        change_max_ms: latencies.max() as f64 / 1000.0,
        trials: latencies.len(),
        missed,
    })
}

pub fn markdown(results: &[ScaleResult]) -> String {
    let mut out = String::from(
        "| pods | agent CPU (cores) | CPU per pod (µs/scrape) | agent RSS (MiB) | snapshot (KiB) | scrapes/s | change→Envoy p50 (ms) | p99 (ms) | max (ms) | trials | missed |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        let per_scrape_us = if r.scrapes_per_s > 0.0 { r.agent_cores / r.scrapes_per_s * 1e6 } else { f64::NAN };
        out.push_str(&format!(
            "| {} | {:.3} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} | {:.1} | {:.1} | {} | {} |\n",
            r.pods,
            r.agent_cores,
            per_scrape_us,
            r.agent_rss_mib,
            r.snapshot_bytes as f64 / 1024.0,
            r.scrapes_per_s,
            r.change_p50_ms,
            r.change_p99_ms,
            r.change_max_ms,
            r.trials,
            r.missed
        ));
    }
    out
}
