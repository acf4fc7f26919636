//! Follows `infergate.yaml` on disk. The file is read again every second and compared
//! with the last text; polling, rather than inotify, survives the symlink swap by which
//! Kubernetes updates a mounted ConfigMap. A file that fails validation is reported
//! with its line and column and the running config is kept.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use infergate_core::config::InfergateConfig;
use tokio::sync::watch;

pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Sends each new valid config; runs until the receiver is gone.
pub async fn follow(path: PathBuf, initial_text: String, sender: watch::Sender<Arc<InfergateConfig>>) {
    let mut last_text = initial_text;
    let mut ticker = tokio::time::interval(POLL_INTERVAL);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        if sender.is_closed() {
            return;
        }
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                if !last_text.is_empty() {
                    tracing::warn!(path = %path.display(), error = %e, "cannot read the config; keeping the running one");
                    last_text.clear();
                }
                continue;
            }
        };
        if text == last_text {
            continue;
        }
        last_text.clone_from(&text);
        match InfergateConfig::from_yaml_str(&text, &path.display().to_string()) {
            Ok(config) => {
                tracing::info!(path = %path.display(), "config changed; the next snapshot carries it");
                sender.send_replace(Arc::new(config));
            }
            Err(e) => tracing::error!(error = %e, "the changed config is invalid; keeping the running one"),
        }
    }
}
