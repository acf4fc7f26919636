//! Real engine pods on this machine, each started by its `engines/<engine>/serve.sh`
//! in a process group of its own and killed as a group when dropped: vLLM's API server
//! has children (EngineCore, its Worker) that a kill of the server alone would leave
//! holding gigabytes. This file holds the pod and vLLM's; `llamacpp.rs` llama.cpp's.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use infergate_signals::exposition;

use crate::artifacts::workspace_root;
use crate::stack::{free_port, loopback};

/// How long a vLLM pod may take to answer `/health` (30-70 s measured on 2 busy cores).
const VLLM_START_TIMEOUT: Duration = Duration::from_secs(300);

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

/// How to start one engine's pod.
pub struct PodCommand<'a> {
    /// The engine's name, for messages and the log file.
    pub engine: &'static str,
    /// `engines/<engine>/serve.sh`, relative to the work tree; it takes the port first.
    pub script: &'a str,
    pub args: &'a [&'a str],
    pub env: &'a [(&'a str, &'a str)],
    /// How long it may take to answer `/health`.
    pub start_timeout: Duration,
}

/// One real engine pod.
pub struct EnginePod {
    pub address: SocketAddr,
    child: Option<Child>,
    pub log: PathBuf,
    engine: &'static str,
    start_timeout: Duration,
}

/// A vLLM pod ([`EnginePod::vllm`]).
pub type VllmPod = EnginePod;

impl EnginePod {
    /// Starts a pod on a free port, its output in `log_dir`; does not wait for it: see
    /// [`EnginePod::wait_ready`].
    pub fn spawn(command: &PodCommand<'_>, log_dir: &Path) -> Self {
        Self::spawn_on(command, &[], free_port(), log_dir)
    }

    /// As [`EnginePod::spawn`], on `port`, with `leading` arguments before the port.
    fn spawn_on(command: &PodCommand<'_>, leading: &[&str], port: u16, log_dir: &Path) -> Self {
        let log = log_dir.join(format!("{}-{port}.log", command.engine));
        let out = std::fs::File::create(&log).expect("create the pod's log");
        let err = out.try_clone().expect("clone the log handle");
        let mut process = Command::new(workspace_root().join(command.script));
        process.args(leading).arg(port.to_string()).args(command.args).stdin(Stdio::null()).stdout(out).stderr(err);
        process.envs(command.env.iter().copied());
        std::os::unix::process::CommandExt::process_group(&mut process, 0);
        let child = process.spawn().unwrap_or_else(|e| panic!("start {}: {e}", command.script));
        Self {
            address: loopback(port),
            child: Some(child),
            log,
            engine: command.engine,
            start_timeout: command.start_timeout,
        }
    }

    /// A vLLM pod serving `smollm2` (and the LoRA adapter `ad1` with `lora`).
    pub fn vllm(lora: bool, log_dir: &Path) -> Self {
        let env: &[(&str, &str)] = if lora { &[("VLLM_LORA", "1")] } else { &[] };
        let command = PodCommand {
            engine: "vllm",
            script: "engines/vllm/serve.sh",
            args: &[],
            env,
            start_timeout: VLLM_START_TIMEOUT,
        };
        Self::spawn(&command, log_dir)
    }

    /// A vLLM pod serving `smollm2` that publishes its KV events (vLLM's
    /// `--kv-events-config`, ZeroMQ over TCP) and serves `/v1/completions/render`
    /// (`--enable-scale-out`), as vllm-router's `kv_aware` needs; the endpoint a
    /// subscriber connects to is returned beside it. vLLM binds its publisher only
    /// for a wildcard endpoint (`tcp://*:PORT`; any other it connects to), and
    /// vllm-router takes only `tcp://HOST:PORT`, so the socket listens on every
    /// address. `env` sets serve.sh's variables (`VLLM_MAX_MODEL_LEN`, ...).
    pub fn vllm_publishing_kv_events(env: &[(&str, &str)], log_dir: &Path) -> (Self, String) {
        let port = free_port();
        let events_port = free_port();
        let config = serde_json::json!({
            "enable_kv_cache_events": true,
            "publisher": "zmq",
            "endpoint": format!("tcp://*:{events_port}"),
            "topic": "",
        })
        .to_string();
        let args = ["--enable-scale-out", "--kv-events-config", config.as_str()];
        let command = PodCommand {
            engine: "vllm",
            script: "engines/vllm/serve.sh",
            args: &args,
            env,
            start_timeout: VLLM_START_TIMEOUT,
        };
        (Self::spawn_on(&command, &[], port, log_dir), format!("tcp://127.0.0.1:{events_port}"))
    }

    /// A vLLM pod of a prefill/decode pair (`engines/vllm/serve-pd.sh`), `role` being
    /// `prefill` or `decode`: `smollm2` with vLLM's NixlConnector, its NIXL side channel
    /// on a free port of its own, and `env` for the script's other variables.
    pub fn vllm_pd(role: &str, env: &[(&str, &str)], log_dir: &Path) -> Self {
        let port = free_port();
        let side_channel = free_port().to_string();
        let mut env = env.to_vec();
        env.push(("VLLM_NIXL_SIDE_CHANNEL_PORT", &side_channel));
        let command = PodCommand {
            engine: "vllm-pd",
            script: "engines/vllm/serve-pd.sh",
            args: &[],
            env: &env,
            start_timeout: VLLM_START_TIMEOUT,
        };
        Self::spawn_on(&command, &[role], port, log_dir)
    }

    /// Waits until `/health` answers 200; panics with the pod's log tail if it exits
    /// or takes longer than its start timeout.
    pub async fn wait_ready(&mut self, client: &reqwest::Client) {
        let started = Instant::now();
        let url = format!("http://{}/health", self.address);
        loop {
            if client.get(&url).send().await.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            let exited = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || started.elapsed() > self.start_timeout {
                panic!("{} on {} did not start ({exited:?}):\n{}", self.engine, self.address, self.log_tail());
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
    /// absent, if the pod does not answer, or if its exposition does not parse.
    pub async fn metric(&self, client: &reqwest::Client, name: &str) -> f64 {
        let text = self.metrics_text(client).await;
        exposition::parse_where(&text, |family| family == name)
            .map(|samples| samples.iter().map(|s| s.value).sum())
            .unwrap_or(0.0)
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

impl Drop for EnginePod {
    fn drop(&mut self) {
        self.kill();
    }
}
