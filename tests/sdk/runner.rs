//! Runs `openai_sdk_checks.py` with the project venv's Python, where `make openai-sdk`
//! installs the pinned SDK; the tests include this file with `#[path]`.

use std::path::PathBuf;
use std::time::Instant;

use infergate_e2e::artifacts::workspace_root;

/// Runs the checks against the gateway at `gateway_url` for `model`, with `flags`
/// (`--tools calls`, `--identity-required`, …); prints their lines and fails the test
/// with them if a check fails or the SDK is missing.
pub async fn run_openai_sdk_checks(gateway_url: &str, model: &str, flags: &[&str]) {
    let root = workspace_root();
    let python = root.join(".venv/bin/python");
    assert!(python.is_file(), "{} is missing; run `make openai-sdk`", python.display());
    let script: PathBuf = root.join("tests/sdk/openai_sdk_checks.py");
    let started = Instant::now();
    let output = tokio::process::Command::new(&python)
        .arg(&script)
        .args(["--base-url", &format!("{gateway_url}/v1"), "--model", model])
        .args(flags)
        // The checks name the gateway; nothing of the environment's may redirect them.
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_CUSTOM_HEADERS")
        .env_remove("OPENAI_ORG_ID")
        .env_remove("OPENAI_PROJECT_ID")
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    println!("{said}(the SDK checks took {:.1} s)", started.elapsed().as_secs_f64());
    assert!(output.status.success(), "the OpenAI SDK checks failed ({}):\n{said}", output.status);
}
