//! Every benchmark binary that starts Envoy and the agent finds them built (in its own
//! profile) and says so with `--preflight`: `make test` runs this, so a bench whose
//! pieces are not where it looks fails in CI, not minutes into `make bench`.

use std::process::Command;

fn preflight(binary: &str) {
    let output = Command::new(binary).arg("--preflight").output().expect("the binary starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{binary} --preflight failed: {stderr}");
    assert!(stderr.contains("preflight: Envoy, the filter and the agent are in place"), "{stderr}");
}

#[test]
fn every_bench_that_starts_a_stack_finds_its_pieces() {
    for binary in [
        env!("CARGO_BIN_EXE_infergate-bench"),
        env!("CARGO_BIN_EXE_soak"),
        env!("CARGO_BIN_EXE_agent_scale"),
        env!("CARGO_BIN_EXE_datapath"),
    ] {
        preflight(binary);
    }
}

#[test]
fn a_missing_piece_is_an_error_that_says_how_to_build_it() {
    let output = Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("--preflight")
        .env("INFERGATE_ENVOY", "/nonexistent/envoy")
        .output()
        .expect("the binary starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("error: /nonexistent/envoy is missing; INFERGATE_ENVOY points at nothing"), "{stderr}");
}
