//! Data-path cost: what the routing decision adds to a request, in the proxy and out of
//! it. Four real Envoys (`--concurrency 2`) in front of the same 8 near-instant pods:
//! A routes round-robin with no filter; F runs the Wasm floor (`bench/floor-filter`: the
//! infergate filter's header and body reads and its routing headers, and nothing else);
//! B runs the infergate filter; C calls `infergate-epp` over ext_proc (the endpoint
//! picker protocol), the same router code in a native process. B and C get live
//! snapshots from the real agent. A closed-loop
//! load generator (N concurrent connections, each sending the next request when the
//! last answer is read) measures each in turn, cell by cell, for each body size and
//! concurrency. A gateway's CPU is its Envoy's plus, for C, the picker's.

pub mod paced;
pub mod streams;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use infergate_envoy_config::{RenderOptions, UpstreamPolicy};
use infergate_harness::{BootstrapWriter, ModelSpec, Stack, StackSpec};
use serde::Serialize;

use infergate_harness::procfs::{cpu_seconds, rss_mib};

pub const BODY_SIZES: [usize; 5] = [1024, 4096, 64 * 1024, 220 * 1024, 1024 * 1024];
pub const CONCURRENCY: [usize; 3] = [1, 32, 150];
pub const PODS: usize = 8;

#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// `A`, `F`, `B` or `C`.
    #[serde(rename = "gateway")]
    pub config: &'static str,
    pub body_bytes: usize,
    pub concurrency: usize,
    pub requests: u64,
    pub errors: u64,
    pub rps: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    /// Envoy CPU time per request, microseconds.
    pub envoy_cpu_us: f64,
    /// The picker's CPU time per request (C only), microseconds.
    pub picker_cpu_us: f64,
}

impl Cell {
    /// The whole gateway's CPU per request: Envoy's and the picker's.
    pub fn gateway_cpu_us(&self) -> f64 {
        self.envoy_cpu_us + self.picker_cpu_us
    }
}

pub struct Gateways {
    pub plain: Stack,
    pub floor: Stack,
    pub infergate: Stack,
    pub picker: Stack,
}

/// How B is configured beside its defaults.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Route before the body ends (`gateway.early_decision`).
    pub early_decision: bool,
    /// `routing.prefix.max_blocks`: how much of a prompt prefix hashing reads.
    pub prefix_max_blocks: u32,
}

fn spec(policy: UpstreamPolicy, options: Options, ext_proc: bool) -> StackSpec {
    let mut routing = infergate_core::config::RoutingSettings::default();
    routing.prefix.max_blocks = options.prefix_max_blocks;
    StackSpec {
        ext_proc,
        early_decision: options.early_decision,
        routing,
        pools: vec![("fleet", PODS)],
        models: vec![ModelSpec::base("m", "fleet")],
        max_body_bytes: 8 * 1024 * 1024,
        upstream_policy: policy,
        access_log: false,
        instant_pods: true,
        ..StackSpec::default()
    }
}

/// F: the router's rendered config with the floor's module in place of the filter's,
/// and no agent (the floor reads no snapshot).
fn floor_spec(options: Options, floor_wasm: std::path::PathBuf) -> StackSpec {
    let render = RenderOptions { access_log: false, ..RenderOptions::new(floor_wasm) };
    let writer = BootstrapWriter(Arc::new(move |config| {
        infergate_envoy_config::render_bootstrap_yaml(config, &render).unwrap_or_else(|e| panic!("render F: {e}"))
    }));
    StackSpec { start_agent: false, bootstrap: Some(writer), ..spec(UpstreamPolicy::Infergate, options, false) }
}

impl Gateways {
    /// Starts the four; `floor_wasm` is the floor filter's module
    /// (`infergate_harness::artifacts::floor_wasm`).
    pub async fn start(options: Options, floor_wasm: std::path::PathBuf) -> Self {
        Self {
            plain: Stack::start(spec(UpstreamPolicy::RoundRobin, options, false)).await,
            floor: Stack::start(floor_spec(options, floor_wasm)).await,
            infergate: Stack::start(spec(UpstreamPolicy::Infergate, options, false)).await,
            picker: Stack::start(spec(UpstreamPolicy::Infergate, options, true)).await,
        }
    }

    /// The four gateways by their letters.
    pub fn each(&self) -> [(&'static str, &Stack); 4] {
        [("A", &self.plain), ("F", &self.floor), ("B", &self.infergate), ("C", &self.picker)]
    }

    /// Pins every Envoy to `envoy_cpu` and the picker to `picker_cpu` (all threads),
    /// so that the ratios are not the load generator's; the caller pins itself.
    pub fn pin(&self, envoy_cpu: usize, picker_cpu: usize) -> Result<(), String> {
        let mut pins: Vec<(u32, usize)> =
            self.each().iter().filter_map(|(_, stack)| stack.envoy_pid()).map(|pid| (pid, envoy_cpu)).collect();
        if let Some(picker) = self.picker.pickers.first() {
            pins.push((picker.pid(), picker_cpu));
        }
        pins.into_iter().try_for_each(|(pid, cpu)| pin_process(pid, cpu))
    }
}

/// `taskset -a -pc CPU PID`: every thread of the process on one CPU.
pub fn pin_process(pid: u32, cpu: usize) -> Result<(), String> {
    let status = std::process::Command::new("taskset")
        .args(["-a", "-pc", &cpu.to_string(), &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run taskset: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("taskset failed for pid {pid}")) }
}

/// Where a body puts `model`: first, as most clients write it, or after `messages`, as
/// the OpenAI Python SDK does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum KeyOrder {
    ModelFirst,
    ModelLast,
}

impl KeyOrder {
    pub fn label(self) -> &'static str {
        match self {
            Self::ModelFirst => "`model` first",
            Self::ModelLast => "`model` last",
        }
    }
}

/// A chat body of about `size` bytes whose prompt starts with a number unique to the
/// request, so that no two requests share a prefix block (the worst case for hashing).
pub fn chat_body(size: usize, sequence: u64) -> Vec<u8> {
    chat_body_in(size, sequence, KeyOrder::ModelFirst)
}

/// [`chat_body`] with `model` where `order` puts it.
pub fn chat_body_in(size: usize, sequence: u64, order: KeyOrder) -> Vec<u8> {
    let (head, tail) = match order {
        KeyOrder::ModelFirst => (
            format!(
                "{{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{{\"role\":\"user\",\"content\":\"{sequence:016} "
            ),
            "\"}]}",
        ),
        KeyOrder::ModelLast => (
            format!("{{\"max_tokens\":1,\"messages\":[{{\"role\":\"user\",\"content\":\"{sequence:016} "),
            "\"}],\"model\":\"m\"}",
        ),
    };
    let filler = size.saturating_sub(head.len() + tail.len());
    let words = b"the quick brown fox jumps over the lazy dog ";
    let mut body = Vec::with_capacity(size);
    body.extend_from_slice(head.as_bytes());
    body.extend(words.iter().cycle().take(filler));
    body.extend_from_slice(tail.as_bytes());
    body
}

/// Runs `concurrency` closed-loop clients against `stack` for `duration` after a
/// short warm-up.
pub async fn measure(
    stack: &Stack,
    config: &'static str,
    body_bytes: usize,
    concurrency: usize,
    duration: Duration,
) -> Cell {
    let url = format!("{}/v1/chat/completions", stack.gateway_url);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap_or_default();
    // One body per client, with the sequence patched per request below.
    let template = Arc::new(chat_body(body_bytes, 0));
    let sequence = Arc::new(AtomicU64::new(1));
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, url, template) = (client.clone(), url.clone(), Arc::clone(&template));
        let (sequence, measuring, stop) = (Arc::clone(&sequence), Arc::clone(&measuring), Arc::clone(&stop));
        tasks.push(tokio::spawn(async move {
            let mut histogram = latency_histogram();
            let mut errors = 0u64;
            let mut body = template.as_ref().clone();
            while !stop.load(Ordering::Relaxed) {
                let n = sequence.fetch_add(1, Ordering::Relaxed);
                let digits = format!("{n:016}");
                let at = body.len().min(body_prefix_len());
                if let Some(slot) = body.get_mut(at - 16..at) {
                    slot.copy_from_slice(digits.as_bytes());
                }
                let started = Instant::now();
                let ok = match client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                {
                    Ok(response) => {
                        let status = response.status();
                        response.bytes().await.is_ok() && status.is_success()
                    }
                    Err(_) => false,
                };
                if measuring.load(Ordering::Relaxed) {
                    if ok {
                        let _ = histogram.record(started.elapsed().as_micros() as u64);
                    } else {
                        errors += 1;
                    }
                }
            }
            (histogram, errors)
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = stack.envoy_pid().unwrap_or(0);
    let picker_pid = stack.pickers.first().map(|p| p.pid());
    let picker_cpu = || picker_pid.and_then(cpu_seconds).unwrap_or(0.0);
    let cpu_before = cpu_seconds(pid).unwrap_or(0.0);
    let picker_before = picker_cpu();
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid).unwrap_or(0.0) - cpu_before;
    let picker_cpu = picker_cpu() - picker_before;
    stop.store(true, Ordering::Relaxed);
    let mut all = latency_histogram();
    let mut errors = 0;
    for task in tasks {
        if let Ok((histogram, e)) = task.await {
            let _ = all.add(histogram);
            errors += e;
        }
    }
    let requests = all.len();
    Cell {
        config,
        body_bytes,
        concurrency,
        requests,
        errors,
        rps: requests as f64 / elapsed,
        p50_us: all.value_at_quantile(0.5),
        p99_us: all.value_at_quantile(0.99),
        p999_us: all.value_at_quantile(0.999),
        envoy_cpu_us: if requests > 0 { cpu / requests as f64 * 1e6 } else { f64::NAN },
        picker_cpu_us: if requests > 0 { picker_cpu / requests as f64 * 1e6 } else { f64::NAN },
    }
}

/// Microseconds, 1 µs to 60 s, 3 significant digits.
pub(crate) fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("constant bounds are valid")
}

/// Where the 16 sequence digits end in a body made by [`chat_body`].
fn body_prefix_len() -> usize {
    "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"".len() + 16
}

/// One gateway's memory after the run.
#[derive(Debug, Clone, Serialize)]
pub struct GatewayFootprint {
    pub gateway: &'static str,
    /// Envoy's resident memory, MiB.
    pub envoy_rss_mib: f64,
    /// The picker's resident memory (C only), MiB.
    pub picker_rss_mib: Option<f64>,
    /// The Wasm VMs' linear memory, all workers together (F and B only).
    pub vm_memory_bytes: Option<u64>,
    /// Worker VMs (Envoy's `--concurrency`) that share `vm_memory_bytes`.
    pub workers: u32,
}

/// What else the run reports: the modules, each gateway's memory and snapshot decodes.
#[derive(Debug, Clone, Serialize)]
pub struct Footprint {
    pub wasm_bytes: u64,
    pub floor_wasm_bytes: u64,
    pub gateways: Vec<GatewayFootprint>,
    pub snapshot_decodes: u64,
    pub snapshot_decodes_per_s: f64,
}

pub async fn footprint(
    gateways: &Gateways,
    floor_wasm: &std::path::Path,
    decodes_before: u64,
    since: Instant,
) -> Footprint {
    let b = &gateways.infergate;
    let decodes = b.stat("infergate.snapshot.decodes").await.unwrap_or(0).saturating_sub(decodes_before);
    let mut each = Vec::new();
    for (gateway, stack) in gateways.each() {
        let wasm = matches!(gateway, "F" | "B");
        each.push(GatewayFootprint {
            gateway,
            envoy_rss_mib: stack.envoy_pid().and_then(rss_mib).unwrap_or(f64::NAN),
            picker_rss_mib: stack.pickers.first().and_then(|p| rss_mib(p.pid())),
            vm_memory_bytes: if wasm { stack.stat("infergate.vm.memory_bytes").await } else { None },
            workers: StackSpec::default().envoy_concurrency,
        });
    }
    let size = |path: &std::path::Path| std::fs::metadata(path).map_or(0, |m| m.len());
    Footprint {
        wasm_bytes: size(&infergate_harness::artifacts::filter_wasm()),
        floor_wasm_bytes: size(floor_wasm),
        gateways: each,
        snapshot_decodes: decodes,
        snapshot_decodes_per_s: decodes as f64 / since.elapsed().as_secs_f64(),
    }
}

/// The run's data as `results.json`: one object per closed-loop cell, per paced cell
/// and per gateway's memory.
pub fn json(cells: &[Cell], paced: &[paced::PacedCell], footprint: &Footprint) -> String {
    serde_json::to_string_pretty(&serde_json::json!({"cells": cells, "paced": paced, "footprint": footprint}))
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// The four gateways side by side: rates, each one's CPU per request (C's: Envoy's and
/// the picker's), what F, B and C add to A, and our share: B − F.
pub fn markdown(cells: &[Cell]) -> String {
    let mut out = String::from(
        "| body | conc. | rps A / F / B / C | B ÷ A rps | CPU/req A | F | B | C: Envoy + picker | B − F | B − A | C − A | (B − A) ÷ (C − A) | added p50 F / B / C (µs) | added p99 F / B / C (µs) | errors A/F/B/C |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for a in cells.iter().filter(|c| c.config == "A") {
        let find = |config: &str| {
            cells.iter().find(|c| c.config == config && c.body_bytes == a.body_bytes && c.concurrency == a.concurrency)
        };
        let (Some(f), Some(b), Some(c)) = (find("F"), find("B"), find("C")) else { continue };
        let added = |x: u64, base: u64| x as i64 - base as i64;
        let cpu = |x: &Cell| x.gateway_cpu_us();
        out.push_str(&format!(
            "| {} | {} | {:.0} / {:.0} / {:.0} / {:.0} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} + {:.0} = {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {} / {} / {} | {} / {} / {} | {}/{}/{}/{} |\n",
            size_label(a.body_bytes),
            a.concurrency,
            a.rps,
            f.rps,
            b.rps,
            c.rps,
            b.rps / a.rps,
            cpu(a),
            cpu(f),
            cpu(b),
            c.envoy_cpu_us,
            c.picker_cpu_us,
            cpu(c),
            cpu(b) - cpu(f),
            cpu(b) - cpu(a),
            cpu(c) - cpu(a),
            (cpu(b) - cpu(a)) / (cpu(c) - cpu(a)),
            added(f.p50_us, a.p50_us),
            added(b.p50_us, a.p50_us),
            added(c.p50_us, a.p50_us),
            added(f.p99_us, a.p99_us),
            added(b.p99_us, a.p99_us),
            added(c.p99_us, a.p99_us),
            a.errors,
            f.errors,
            b.errors,
            c.errors
        ));
    }
    out
}

/// Each gateway's memory after the run.
pub fn footprint_markdown(footprint: &Footprint) -> String {
    let plain = footprint.gateways.first().map_or(f64::NAN, |a| a.envoy_rss_mib);
    let mut out = String::from(
        "| gateway | Envoy RSS (MiB) | ÷ A | picker RSS (MiB) | Wasm linear memory, per worker VM (MiB) |\n|---|---:|---:|---:|---:|\n",
    );
    for g in &footprint.gateways {
        let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
        out.push_str(&format!(
            "| {} | {:.1} | {:.2} | {} | {} |\n",
            g.gateway,
            g.envoy_rss_mib,
            g.envoy_rss_mib / plain,
            g.picker_rss_mib.map_or("–".into(), |m| format!("{m:.1}")),
            g.vm_memory_bytes.map_or("–".into(), |b| format!("{:.1}", mib(b) / f64::from(g.workers.max(1)))),
        ));
    }
    out
}

pub fn size_label(bytes: usize) -> String {
    if bytes >= 1024 * 1024 { format!("{} MiB", bytes / (1024 * 1024)) } else { format!("{} KiB", bytes / 1024) }
}
