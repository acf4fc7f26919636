//! The peers' own routers, run as a user would run them: the Shepherd Model Gateway
//! (`smg`, PyPI 1.13.0) and vLLM's router (`vllm-router`, PyPI 0.1.17), each as a
//! gateway of its own in front of pods this process names, from the venv that
//! `engines/peers/setup.sh` installs. Every flag not named here is the router's
//! default; [`PeerRouter::args`] is the whole command line.
//!
//! A router is a process of its own, killed when dropped; its log is a file, so that a
//! router that does not come up says why.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::artifacts::workspace_root;
use crate::stack::{free_port, loopback};

/// The versions `engines/peers/requirements.lock` pins, for reports.
pub const SMG_VERSION: &str = "1.13.0";
pub const VLLM_ROUTER_VERSION: &str = "0.1.17";

/// How long a router may take to list a model: both start in well under 10 s here.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The session header vllm-router reads first (`SESSION_HEADER_NAMES` in its
/// `policies/hash_key.rs`), which the bench sends on every call of a conversation or
/// an agent session, to every gateway alike.
pub const SESSION_HEADER: &str = "x-session-id";

/// One peer router and its policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerRouter {
    /// `smg --policy cache_aware`, every tuning flag at its default.
    SmgCacheAware,
    /// `smg --policy prefix_hash` (256 prefix tokens hashed onto a ring).
    SmgPrefixHash,
    /// `vllm-router --policy cache_aware`, at its defaults.
    VllmRouterCacheAware,
    /// `vllm-router --policy sticky_least_loaded`: a session stays on its worker; a
    /// new one goes to the least loaded. Sessions are named by [`SESSION_HEADER`].
    VllmRouterSticky,
    /// `vllm-router --policy kv_aware`, fed each pod's KV-event stream (vLLM's
    /// `--kv-events-config` ZMQ publisher; the router takes only `tcp://HOST:PORT`), with session affinity
    /// when `session_ttl_s` is set. The router hashes the token ids the events carry in
    /// blocks of `block_size` (the pods' own), and gets a prompt's token ids from each
    /// pod's `/v1/chat/completions/render` (vLLM serves it with `--enable-scale-out`).
    VllmRouterKvAware { kv_events: Vec<(SocketAddr, String)>, block_size: u32, session_ttl_s: Option<u64> },
}

impl PeerRouter {
    /// The name results use (`bench/results/peers/results.json`'s `gateway`).
    pub fn name(&self) -> &'static str {
        match self {
            PeerRouter::SmgCacheAware => "smg_cache_aware",
            PeerRouter::SmgPrefixHash => "smg_prefix_hash",
            PeerRouter::VllmRouterCacheAware => "vllm_router_cache_aware",
            PeerRouter::VllmRouterSticky => "vllm_router_sticky",
            PeerRouter::VllmRouterKvAware { .. } => "vllm_router_kv_aware",
        }
    }

    /// The program in the peers' venv.
    pub fn program(&self) -> &'static str {
        match self {
            PeerRouter::SmgCacheAware | PeerRouter::SmgPrefixHash => "smg",
            _ => "vllm-router",
        }
    }

    /// The whole command line after the program, serving on `port` (metrics on
    /// `metrics_port`) in front of `pods`.
    pub fn args(&self, port: u16, metrics_port: u16, pods: &[SocketAddr]) -> Vec<String> {
        let workers = pods.iter().map(|pod| format!("http://{pod}"));
        let mut args: Vec<String> = Vec::new();
        if self.program() == "smg" {
            args.push("launch".into());
        }
        args.extend(["--host".into(), "127.0.0.1".into(), "--port".into(), port.to_string()]);
        // smg binds its metrics on every address unless told.
        args.extend([
            "--prometheus-host".into(),
            "127.0.0.1".into(),
            "--prometheus-port".into(),
            metrics_port.to_string(),
        ]);
        args.push("--worker-urls".into());
        args.extend(workers);
        let policy = match self {
            PeerRouter::SmgCacheAware | PeerRouter::VllmRouterCacheAware => "cache_aware",
            PeerRouter::SmgPrefixHash => "prefix_hash",
            PeerRouter::VllmRouterSticky => "sticky_least_loaded",
            PeerRouter::VllmRouterKvAware { .. } => "kv_aware",
        };
        args.extend(["--policy".into(), policy.into()]);
        match self {
            PeerRouter::SmgCacheAware | PeerRouter::SmgPrefixHash => {
                args.extend(["--log-level".into(), "warn".into()]);
            }
            PeerRouter::VllmRouterKvAware { kv_events, block_size, session_ttl_s } => {
                for (pod, endpoint) in kv_events {
                    args.extend(["--kv-event-source".into(), format!("http://{pod}={endpoint}")]);
                }
                // The model's name in the router's index: a label, not a tokenizer.
                args.extend(["--kv-event-model".into(), "served".into()]);
                args.extend(["--kv-event-block-size".into(), block_size.to_string()]);
                if let Some(ttl) = session_ttl_s {
                    args.extend(["--kv-aware-session-affinity-ttl-secs".into(), ttl.to_string()]);
                }
                args.extend(["--log-level".into(), "warning".into()]);
            }
            PeerRouter::VllmRouterCacheAware | PeerRouter::VllmRouterSticky => {
                args.extend(["--log-level".into(), "warning".into()]);
            }
        }
        args
    }
}

/// The peers' venv, or why it is missing.
pub fn peers_venv() -> Result<PathBuf, String> {
    let venv = std::env::var_os("PEERS_VENV").map_or_else(|| workspace_root().join(".venv-peers"), PathBuf::from);
    let missing: Vec<&str> =
        ["smg", "vllm-router"].into_iter().filter(|p| !venv.join("bin").join(p).is_file()).collect();
    if missing.is_empty() {
        Ok(venv)
    } else {
        Err(format!(
            "the peer routers ({}) are not installed in {}: run `make peers` (engines/peers/setup.sh)",
            missing.join(", "),
            venv.display()
        ))
    }
}

/// One running peer router.
pub struct PeerGateway {
    pub router: PeerRouter,
    pub address: SocketAddr,
    pub log: PathBuf,
    metrics_port: u16,
    child: Option<Child>,
}

impl PeerGateway {
    /// Starts `router` in front of `pods`, its output in `log_dir`, and waits until it
    /// lists `model` (both routers list their workers' models once they are healthy);
    /// `Err` with the router's log if it exits or does not come up in a minute.
    pub async fn start(router: PeerRouter, pods: &[SocketAddr], model: &str, log_dir: &Path) -> Result<Self, String> {
        let venv = peers_venv()?;
        let (port, metrics_port) = (free_port(), free_port());
        let log = log_dir.join(format!("{}-{port}.log", router.name()));
        let out = std::fs::File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut command = Command::new(venv.join("bin").join(router.program()));
        command
            .args(router.args(port, metrics_port, pods))
            // Nothing is fetched at run time: no hub, whatever a router might try.
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_OFFLINE", "1")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child = command.spawn().map_err(|e| format!("cannot start {}: {e}", router.program()))?;
        let mut gateway = Self { router, address: loopback(port), log, metrics_port, child: Some(child) };
        gateway.wait_ready(model).await?;
        Ok(gateway)
    }

    /// The router's chat completions URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    async fn wait_ready(&mut self, model: &str) -> Result<(), String> {
        let client = reqwest::Client::new();
        let started = Instant::now();
        let url = format!("{}/v1/models", self.url());
        loop {
            let listed = match client.get(&url).timeout(Duration::from_secs(2)).send().await {
                Ok(response) if response.status().is_success() => {
                    response.text().await.is_ok_and(|text| text.contains(&format!("\"{model}\"")))
                }
                _ => false,
            };
            if listed {
                return Ok(());
            }
            let exited = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || started.elapsed() > START_TIMEOUT {
                return Err(format!(
                    "{} on {} did not list model {model} ({exited:?}):\n{}",
                    self.router.name(),
                    self.address,
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The router's own Prometheus metrics now, beside its log as `<log>.metrics`
    /// (what it decided, by its own counters); a router that does not answer leaves
    /// none.
    pub async fn keep_metrics(&self) {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics_port);
        let text = match reqwest::Client::new().get(&url).timeout(Duration::from_secs(5)).send().await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => return,
        };
        let _ = std::fs::write(self.log.with_extension("metrics"), text);
    }

    /// The last lines of the router's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines.get(lines.len().saturating_sub(30)..).unwrap_or_default().join("\n")
    }
}

impl Drop for PeerGateway {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_router_is_told_its_policy_and_nothing_else_but_its_ports() {
        let pods = [loopback(9001), loopback(9002)];
        let smg = PeerRouter::SmgCacheAware.args(8000, 8001, &pods).join(" ");
        assert_eq!(
            smg,
            "launch --host 127.0.0.1 --port 8000 --prometheus-host 127.0.0.1 --prometheus-port 8001 --worker-urls http://127.0.0.1:9001 \
             http://127.0.0.1:9002 --policy cache_aware --log-level warn"
        );
        let sticky = PeerRouter::VllmRouterSticky.args(8000, 8001, &pods).join(" ");
        assert!(sticky.starts_with("--host 127.0.0.1 --port 8000"), "{sticky}");
        assert!(sticky.contains("--policy sticky_least_loaded"), "{sticky}");
        let kv = PeerRouter::VllmRouterKvAware {
            kv_events: vec![(pods[0], "tcp://127.0.0.1:5557".into())],
            block_size: 128,
            session_ttl_s: Some(600),
        };
        let kv = kv.args(8000, 8001, &pods).join(" ");
        assert!(kv.contains("--kv-event-source http://127.0.0.1:9001=tcp://127.0.0.1:5557"), "{kv}");
        assert!(kv.contains("--kv-event-block-size 128"), "{kv}");
        assert!(kv.contains("--kv-aware-session-affinity-ttl-secs 600"), "{kv}");
    }

    #[test]
    fn the_names_are_the_results_schema_names() {
        let names: Vec<&str> = [
            PeerRouter::SmgCacheAware,
            PeerRouter::SmgPrefixHash,
            PeerRouter::VllmRouterCacheAware,
            PeerRouter::VllmRouterSticky,
            PeerRouter::VllmRouterKvAware { kv_events: Vec::new(), block_size: 16, session_ttl_s: None },
        ]
        .iter()
        .map(PeerRouter::name)
        .collect();
        assert_eq!(
            names,
            [
                "smg_cache_aware",
                "smg_prefix_hash",
                "vllm_router_cache_aware",
                "vllm_router_sticky",
                "vllm_router_kv_aware"
            ]
        );
    }
}
