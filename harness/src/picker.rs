//! `infergate-epp` as a process beside the stack's Envoy: started on the stack's
//! config and token, with its gRPC and control ports, and read through its `/metrics`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::artifacts;
use crate::stack::{free_port, loopback};

pub struct PickerProcess {
    /// Where Envoy's ext_proc filter connects.
    pub grpc: SocketAddr,
    /// Where the agent pushes, and `/metrics` answers.
    pub control_url: String,
    child: Child,
}

/// The log of picker number `index`: `picker.log` for the first.
pub fn log_name(index: usize) -> String {
    if index == 0 { "picker.log".into() } else { format!("picker-{index}.log") }
}

impl PickerProcess {
    /// Starts picker number `index` on `dir`'s `infergate.yaml` and `token`, logging to
    /// [`log_name`], and waits until it answers `/healthz`.
    pub async fn start(dir: &Path, index: usize, client: &reqwest::Client) -> Self {
        let grpc = loopback(free_port());
        let control = loopback(free_port());
        let log = std::fs::File::create(dir.join(log_name(index))).expect("create the picker's log");
        let child = Command::new(artifacts::binary("infergate-epp"))
            .arg("-c")
            .arg(dir.join("infergate.yaml"))
            .args(["--listen", &grpc.to_string(), "--control", &control.to_string(), "--explain"])
            .arg("--token-file")
            .arg(dir.join("token"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start infergate-epp");
        let picker = Self { grpc, control_url: format!("http://{control}"), child };
        let healthz = format!("{}/healthz", picker.control_url);
        let deadline = Instant::now() + Duration::from_secs(15);
        while !client.get(&healthz).send().await.is_ok_and(|r| r.status().is_success()) {
            assert!(Instant::now() < deadline, "infergate-epp did not answer {healthz}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        picker
    }

    /// A counter or gauge from the picker's `/metrics`, by its exposed name.
    pub async fn metric(&self, client: &reqwest::Client, name: &str) -> Option<u64> {
        let text = client.get(format!("{}/metrics", self.control_url)).send().await.ok()?.text().await.ok()?;
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.split_once(' '))
            .find(|(key, _)| *key == name)
            .and_then(|(_, value)| value.trim().parse::<f64>().ok())
            .map(|value| value as u64)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process at once (SIGKILL): its streams and connections just end.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Asks the process to stop (SIGTERM), as Kubernetes does: it drains.
    pub fn terminate(&self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -TERM {}", self.child.id());
    }

    /// Waits up to `timeout` for the process to exit; whether it did, successfully.
    pub async fn exited_cleanly(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

impl Drop for PickerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
