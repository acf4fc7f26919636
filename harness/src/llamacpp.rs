//! Real llama.cpp pods (`llama-server` on CPU), started with `engines/llamacpp/serve.sh`
//! from the binary and model that `make llamacpp` builds. The server is one process, but
//! each pod still runs in its own process group and the whole group is killed when the
//! pod is dropped, as for vLLM.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::artifacts::workspace_root;
use crate::stack::{free_port, loopback};

/// How long a pod may take to answer `/health` (about a second when idle; the model is
/// 98 MB).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The model file `engines/llamacpp/setup.sh` installs.
const MODEL_FILE: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where `setup.sh` builds: `LLAMACPP_DIR`, else `.cache/llamacpp` in the work tree.
fn llamacpp_dir() -> PathBuf {
    std::env::var_os("LLAMACPP_DIR").map_or_else(|| workspace_root().join(".cache/llamacpp"), PathBuf::from)
}

/// The `llama-server` binary and the model that `engines/llamacpp/setup.sh` builds, or
/// which of them is missing and how to get it.
pub fn llamacpp_installed() -> Result<(), String> {
    let dir = llamacpp_dir();
    let server = std::env::var_os("LLAMACPP_SERVER").map_or_else(|| dir.join("bin/llama-server"), PathBuf::from);
    let model = std::env::var_os("LLAMACPP_MODEL").map_or_else(|| dir.join(MODEL_FILE), PathBuf::from);
    let missing: Vec<String> =
        [&server, &model].iter().filter(|p| !p.is_file()).map(|p| p.display().to_string()).collect();
    if !missing.is_empty() {
        return Err(format!(
            "llama.cpp is not built ({} missing): run `make llamacpp` (engines/llamacpp/setup.sh; 6-11 min on \
             2 cores the first time)",
            missing.join(" and ")
        ));
    }
    Ok(())
}

/// One real llama.cpp pod.
pub struct LlamaCppPod {
    pub address: SocketAddr,
    child: Option<Child>,
    pub log: PathBuf,
}

impl LlamaCppPod {
    /// Starts a pod serving `smollm2` with `serve.sh`'s defaults (2 slots, 2,048 tokens
    /// of context, one thread) plus `extra` llama-server arguments; does not wait for
    /// it: see [`LlamaCppPod::wait_ready`].
    pub fn spawn(log_dir: &Path, extra: &[&str]) -> Self {
        let port = free_port();
        let log = log_dir.join(format!("llamacpp-{port}.log"));
        let out = std::fs::File::create(&log).expect("create the pod's log");
        let err = out.try_clone().expect("clone the log handle");
        let mut command = Command::new(workspace_root().join("engines/llamacpp/serve.sh"));
        command.arg(port.to_string()).args(extra).stdin(Stdio::null()).stdout(out).stderr(err);
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().expect("start engines/llamacpp/serve.sh");
        Self { address: loopback(port), child: Some(child), log }
    }

    /// Waits until `/health` answers 200 (llama-server answers 503 while it loads the
    /// model); panics with the pod's log tail if it exits or takes longer than
    /// [`START_TIMEOUT`].
    pub async fn wait_ready(&mut self, client: &reqwest::Client) {
        let started = Instant::now();
        let url = format!("http://{}/health", self.address);
        loop {
            if client.get(&url).send().await.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            let exited = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || started.elapsed() > START_TIMEOUT {
                panic!("llama.cpp on {} did not start ({exited:?}):\n{}", self.address, self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The last lines of the pod's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// The pod's own `/metrics` text, empty if it does not answer.
    pub async fn metrics_text(&self, client: &reqwest::Client) -> String {
        let url = format!("http://{}/metrics", self.address);
        match client.get(&url).send().await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// A counter or gauge from the pod's own `/metrics`, summed over its series; 0 if
    /// absent or the pod does not answer.
    pub async fn metric(&self, client: &reqwest::Client, name: &str) -> f64 {
        self.metrics_text(client)
            .await
            .lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Kills the pod's whole process group at once, as a crashed node would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-9", "--", &group]).status();
            let _ = child.wait();
        }
    }
}

impl Drop for LlamaCppPod {
    fn drop(&mut self) {
        self.kill();
    }
}
