//! The simulated pods, in this process on real loopback sockets.

use std::net::SocketAddr;
use std::sync::Arc;

use infergate_model_sim::engine::EngineProfile;
use infergate_model_sim::server::{Pod, PodSpec, serve};
use tokio::net::TcpListener;
use tokio::sync::Notify;

pub struct Fleet {
    pub pods: Vec<SocketAddr>,
    stop: Arc<Notify>,
}

impl Fleet {
    pub async fn start(count: usize, profile: EngineProfile, time_scale: f64, adapters: &[String]) -> Self {
        let stop = Arc::new(Notify::new());
        let mut pods = Vec::new();
        for _ in 0..count {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a pod port");
            let address = listener.local_addr().expect("pod address");
            let pod = Pod::new(PodSpec { time_scale, adapters: adapters.to_vec(), ..PodSpec::new(address, profile) });
            tokio::spawn(serve(pod, listener, Arc::clone(&stop)));
            pods.push(address);
        }
        Self { pods, stop }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop.notify_waiters();
    }
}
