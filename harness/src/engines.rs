//! Real vLLM pods (CPU), started with `engines/vllm/serve.sh` from the venv and model
//! that `make vllm` installs. Each pod runs in its own process group: its API server
//! has children (EngineCore, its Worker) that a kill of the server alone would leave
//! holding gigabytes, so the whole group is killed when the pod is dropped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::artifacts::workspace_root;
use crate::stack::{free_port, loopback};

/// How long a pod may take to answer `/health` (30-70 s measured on 2 busy cores).
const START_TIMEOUT: Duration = Duration::from_secs(300);

/// The venv and the model `engines/vllm/setup.sh` builds, or why they are missing.
pub fn vllm_installed() -> Result<(), String> {
    let root = workspace_root();
    let venv = std::env::var_os("VLLM_VENV").map_or_else(|| root.join(".venv-vllm"), PathBuf::from);
    let model = std::env::var_os("VLLM_MODEL_DIR")
        .map_or_else(|| root.join(".cache/models/smollm2-135m-instruct"), PathBuf::from);
    if !venv.join("bin/python").exists() || !model.join(".done").exists() {
        return Err(format!(
            "real vLLM is not installed ({} or {} missing): run `make vllm` (engines/vllm/setup.sh)",
            venv.display(),
            model.display()
        ));
    }
    Ok(())
}

/// One real vLLM pod.
pub struct VllmPod {
    pub address: SocketAddr,
    child: Option<Child>,
    pub log: PathBuf,
}

impl VllmPod {
    /// Starts a pod serving `smollm2` (and the LoRA adapter `ad1` with `lora`); does
    /// not wait for it: see [`VllmPod::wait_ready`].
    pub fn spawn(lora: bool, log_dir: &std::path::Path) -> Self {
        let port = free_port();
        let log = log_dir.join(format!("vllm-{port}.log"));
        let out = std::fs::File::create(&log).expect("create the pod's log");
        let err = out.try_clone().expect("clone the log handle");
        let mut command = Command::new(workspace_root().join("engines/vllm/serve.sh"));
        command.arg(port.to_string()).stdin(Stdio::null()).stdout(out).stderr(err);
        if lora {
            command.env("VLLM_LORA", "1");
        }
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().expect("start engines/vllm/serve.sh");
        Self { address: loopback(port), child: Some(child), log }
    }

    /// Waits until `/health` answers 200; panics with the pod's log tail if it exits
    /// or takes longer than five minutes.
    pub async fn wait_ready(&mut self, client: &reqwest::Client) {
        let started = Instant::now();
        let url = format!("http://{}/health", self.address);
        loop {
            if client.get(&url).send().await.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            let exited = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || started.elapsed() > START_TIMEOUT {
                panic!("vLLM on {} did not start ({exited:?}):\n{}", self.address, self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The last lines of the pod's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// A counter or gauge from the pod's own `/metrics`, summed over its series.
    pub async fn metric(&self, client: &reqwest::Client, name: &str) -> f64 {
        let url = format!("http://{}/metrics", self.address);
        let text = match client.get(&url).send().await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => return 0.0,
        };
        text.lines()
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

impl Drop for VllmPod {
    fn drop(&mut self) {
        self.kill();
    }
}
