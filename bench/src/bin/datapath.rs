//! `datapath`: plain Envoy (A), Envoy with a do-nothing Wasm filter that reads what the
//! infergate filter reads (F, the floor), Envoy with the infergate filter (B) and Envoy
//! calling infergate-epp over ext_proc (C), near-instant pods, every body size and
//! concurrency; prints Markdown tables and writes them to
//! bench/results/datapath/results.md, and the data to results.json beside it.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use infergate_bench::cli;
use infergate_bench::datapath::paced::Pace;
use infergate_bench::datapath::{self, BODY_SIZES, CONCURRENCY, Gateways, KeyOrder, Options};
use infergate_core::config::PrefixSettings;

/// Measures what the in-proxy routing decision costs per request.
#[derive(Parser)]
struct Args {
    /// Only check that Envoy, the filter and the agent are built, then exit.
    #[arg(long)]
    preflight: bool,
    /// Seconds measured per cell (after a 0.5 s warm-up).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Body sizes in bytes (comma-separated); default 1 KiB, 4 KiB, 64 KiB, 220 KiB, 1 MiB.
    #[arg(long, value_delimiter = ',')]
    bodies: Vec<usize>,
    /// Concurrencies (comma-separated); default 1, 32, 150.
    #[arg(long, value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// Requests per body size and key order uploaded at a bounded pace (64 KiB every
    /// 2 ms), one at a time, timed from their last byte to the pod's receipt and to the
    /// answer's first byte; 0 skips them.
    #[arg(long, default_value_t = 40)]
    paced_requests: u64,
    /// Concurrent stream counts to ramp through, each gateway in turn (comma-separated;
    /// 0 skips the ramp).
    #[arg(long, value_delimiter = ',', default_values_t = [500, 1000, 2000])]
    streams: Vec<usize>,
    /// How long the pods hold each answer during the ramp, milliseconds.
    #[arg(long, default_value_t = 2000)]
    hold_ms: u64,
    /// Pin every Envoy to CPU 0, and the picker and this process (the load generator
    /// and the pods) to CPU 1, so that the gateways do not compete with the load.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pin: bool,
    /// Whether B and C route before the body ends (`gateway.early_decision`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    early_decision: bool,
    /// B's `routing.prefix.max_blocks` (64-byte blocks hashed per prompt).
    #[arg(long, default_value_t = PrefixSettings::default().max_blocks)]
    prefix_max_blocks: u32,
    #[arg(long, default_value = "bench/results/datapath")]
    out: std::path::PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(code) = cli::preflight(args.preflight) {
        return code;
    }
    let bodies = if args.bodies.is_empty() { BODY_SIZES.to_vec() } else { args.bodies.clone() };
    let concurrencies = if args.concurrency.is_empty() { CONCURRENCY.to_vec() } else { args.concurrency.clone() };
    let floor_wasm = match infergate_harness::artifacts::floor_wasm() {
        Ok(path) => path,
        Err(message) => {
            eprintln!("error: the Wasm floor: {message}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match cli::runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let report = runtime.block_on(async {
        let options = Options { early_decision: args.early_decision, prefix_max_blocks: args.prefix_max_blocks };
        let gateways = Gateways::start(options, floor_wasm.clone()).await;
        let pinned = if args.pin {
            match gateways.pin(0, 1).and_then(|()| datapath::pin_process(std::process::id(), 1)) {
                Ok(()) => "Envoys on CPU 0; the picker, the load generator and the pods on CPU 1".to_string(),
                Err(err) => format!("not pinned: {err}"),
            }
        } else {
            "not pinned".to_string()
        };
        let decodes_before = gateways.infergate.stat("infergate.snapshot.decodes").await.unwrap_or(0);
        let since = Instant::now();
        let mut cells = Vec::new();
        let duration = Duration::from_secs_f64(args.seconds);
        for &body in &bodies {
            for &concurrency in &concurrencies {
                for (name, stack) in gateways.each() {
                    let cell = datapath::measure(stack, name, body, concurrency, duration).await;
                    eprintln!("{cell:?}");
                    cells.push(cell);
                }
            }
        }
        let pace = Pace { piece: 64 * 1024, pause: Duration::from_millis(2) };
        let mut paced = Vec::new();
        for &body in bodies.iter().filter(|_| args.paced_requests > 0) {
            for order in [KeyOrder::ModelFirst, KeyOrder::ModelLast] {
                for (name, stack) in gateways.each() {
                    let cell = datapath::paced::measure(stack, name, body, order, pace, args.paced_requests).await;
                    eprintln!("{cell:?}");
                    paced.push(cell);
                }
            }
        }
        let hold = Duration::from_millis(args.hold_ms);
        let mut ramp = Vec::new();
        for &streams in args.streams.iter().filter(|&&n| n > 0) {
            for (name, stack) in gateways.each() {
                let cell = datapath::streams::measure(stack, name, streams, hold).await;
                eprintln!("{cell:?}");
                ramp.push(cell);
            }
        }
        let ramp = if ramp.is_empty() { String::new() } else { datapath::streams::markdown(&ramp, hold) };
        let footprint = datapath::footprint(&gateways, &floor_wasm, decodes_before, since).await;
        let paced_text = if paced.is_empty() { String::new() } else { datapath::paced::markdown(&paced, pace) };
        let text = format!(
            "{}\n{paced_text}\n{ramp}\nMemory after the run:\n\n{}\n- {pinned}\n- B and C route before the body ends: {}; hash up to {} prefix blocks\n- `.wasm`: B {} bytes, F {} bytes\n- snapshots decoded in B during the run: {} ({:.1} per second, both workers together)\n",
            datapath::markdown(&cells),
            datapath::footprint_markdown(&footprint),
            args.early_decision,
            args.prefix_max_blocks,
            footprint.wasm_bytes,
            footprint.floor_wasm_bytes,
            footprint.snapshot_decodes,
            footprint.snapshot_decodes_per_s
        );
        (text, datapath::json(&cells, &paced, &footprint))
    });
    let (report, json) = report;
    if let Err(e) =
        std::fs::create_dir_all(&args.out).and_then(|()| std::fs::write(args.out.join("results.json"), json))
    {
        eprintln!("error: cannot write {}: {e}", args.out.join("results.json").display());
        return ExitCode::FAILURE;
    }
    cli::report(&args.out, &report)
}
