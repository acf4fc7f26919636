//! The scraper against real HTTP endpoints: a pod that accepts connections and never
//! answers costs the snapshot at most the scrape timeout, and is kept, marked by its
//! old scrape time, rather than dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use infergate_core::Endpoint;
use infergate_core::config::InfergateConfig;
use infergate_metrics_agent::FleetScraper;
use infergate_metrics_agent::discovery::Fleet;

const VLLM_SAMPLE: &str = include_str!("../../signals/tests/data/vllm-v1_qwen3-0.6b.txt");

async fn serve_metrics(text: &'static str) -> SocketAddr {
    serve_metrics_at("/metrics", text).await
}

async fn serve_metrics_at(path: &'static str, text: &'static str) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new().route(path, axum::routing::get(move || async move { text }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

/// Accepts connections and reads requests, but never answers.
async fn serve_nothing() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_pod_costs_the_snapshot_no_more_than_the_scrape_timeout() {
    let good = [serve_metrics(VLLM_SAMPLE).await, serve_metrics(VLLM_SAMPLE).await];
    let hanging = serve_nothing().await;
    let endpoints: Vec<String> = good.iter().chain([&hanging]).map(|a| format!("\"{a}\"")).collect();
    let yaml = format!(
        "version: 1\nagent: {{scrape_interval_ms: 100, scrape_timeout_ms: 80}}\npools:\n  - name: a\n    endpoints: [{}]\nmodels: [{{name: m, pool: a}}]\n",
        endpoints.join(", ")
    );
    let config = InfergateConfig::from_yaml_str(&yaml, "test.yaml").unwrap();
    let mut scraper = FleetScraper::new(reqwest::Client::new(), Fleet::new(Arc::new(config)));
    for round in 0..3 {
        let started = Instant::now();
        let snapshot = scraper.scrape().await;
        let took = started.elapsed();
        assert!(took < Duration::from_millis(80 + 60), "round {round} took {took:?}");
        let pods = &snapshot.pools[0].pods;
        assert_eq!(pods.len(), 3, "the hanging pod stays listed");
        for pod in pods {
            let is_hanging = pod.address == Endpoint::new(hanging);
            assert_eq!(pod.signals.is_some(), !is_hanging, "{pod:?}");
            // Slow, not refusing: still ready, but never freshly scraped, so the filter
            // treats it as stale and routes to it on load alone.
            assert!(pod.ready);
            assert_eq!(pod.scraped_at_ms.is_none(), is_hanging);
        }
    }
    assert_eq!(scraper.failing_pods().copied().collect::<Vec<_>>(), vec![Endpoint::new(hanging)]);
}

/// `metrics-agent parse` on a file and on a URL prints the same normalized signals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parse_command_reads_a_file_and_a_url() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../signals/tests/data/vllm-v1_qwen3-0.6b.txt");
    let url = format!("http://{}/metrics", serve_metrics(VLLM_SAMPLE).await);
    let mut outputs = Vec::new();
    for source in [file.to_string(), url] {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_metrics-agent"))
            .args(["parse", "--engine", "auto", &source])
            .output()
            .await
            .unwrap();
        assert!(output.status.success(), "{source}: {}", String::from_utf8_lossy(&output.stderr));
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert!(json["kv_cache_usage"].is_number(), "{json}");
        outputs.push(json);
    }
    assert_eq!(outputs[0], outputs[1]);
    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_metrics-agent"))
        .args(["parse", "/nonexistent/metrics.txt"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read /nonexistent/metrics.txt"));
}

/// Older and sparser engines: trtllm-serve is scraped at `/prometheus/metrics` (its
/// `/metrics` is JSON), and what a pod does not export travels as unknown, not as 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sparse_engines_are_scraped_where_they_serve_and_their_gaps_stay_unknown() {
    let trtllm = serve_metrics_at(
        "/prometheus/metrics",
        include_str!("../../signals/tests/data/trtllm-serve_1.1_histograms.txt"),
    )
    .await;
    let llama = serve_metrics(include_str!("../../signals/tests/data/llamacpp_b5500-no-kv.txt")).await;
    let yaml = format!(
        "version: 1\npools:\n  - name: t\n    engine: trtllm\n    endpoints: [\"{trtllm}\"]\n  - name: l\n    engine: llama-cpp\n    endpoints: [\"{llama}\"]\nmodels: [{{name: m, pool: t}}]\n"
    );
    let config = InfergateConfig::from_yaml_str(&yaml, "test.yaml").unwrap();
    let mut scraper = FleetScraper::new(reqwest::Client::new(), Fleet::new(Arc::new(config)));
    let snapshot = scraper.scrape().await;
    assert_eq!(scraper.failing_pods().count(), 0, "both scraped");
    let signals = |pool: usize| snapshot.pools[pool].pods[0].signals.clone().unwrap();
    let (t, l) = (signals(0), signals(1));
    assert_eq!((t.waiting, t.running, t.kv_cache_usage), (None, None, None));
    assert_eq!((l.waiting, l.running, l.kv_cache_usage), (Some(2.0), Some(1.0), None));
    // What travels is what the filter reads: the snapshot still decodes.
    let decoded = infergate_core::snapshot::Snapshot::decode(&snapshot.encode().unwrap()).unwrap();
    assert_eq!(decoded.pools[1].pods[0].signals.as_ref().unwrap().kv_cache_usage, None);
}
