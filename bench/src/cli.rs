//! What the measurement binaries (`agent_scale`, `datapath`, `soak`) share: their
//! two-thread runtime and where their Markdown results go.

use std::path::Path;
use std::process::ExitCode;

/// The runtime the binaries drive real processes with: two threads, like the machine.
pub fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(|e| {
        eprintln!("error: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
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
