//! What the measurement binaries (`agent_scale`, `datapath`, `soak`) share: their
//! two-thread runtime, the check that what they start is built, and where their
//! Markdown results go.

use std::path::Path;
use std::process::ExitCode;

/// The runtime the binaries drive real processes with: two threads, like the machine.
pub fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(|e| {
        eprintln!("error: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}

/// Checks that Envoy, the filter and the agent of this profile are there before any
/// work starts: a missing piece is an error that says how to build it, not a panic
/// minutes into a run. With `only`, a pass ends the run (`--preflight`: what CI runs).
pub fn preflight(only: bool) -> Result<(), ExitCode> {
    let missing = infergate_harness::artifacts::missing_for_stack();
    for what in &missing {
        eprintln!("error: {what}");
    }
    if !missing.is_empty() {
        return Err(ExitCode::from(2));
    }
    if only {
        eprintln!("preflight: Envoy, the filter and the agent are in place");
        return Err(ExitCode::SUCCESS);
    }
    Ok(())
}

/// Prints `text` and writes it to `out/results.md`.
pub fn report(out: &Path, text: &str) -> ExitCode {
    println!("{text}");
    match std::fs::create_dir_all(out).and_then(|()| std::fs::write(out.join("results.md"), text)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write {}: {e}", out.display());
            ExitCode::FAILURE
        }
    }
}
