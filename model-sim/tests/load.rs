//! Load on the HTTP fleet: 16 pods from one process at 200 requests/s for 10 s, every
//! request served. The sim's CPU use over the run is printed (and recorded in
//! docs/model-sim.md); it is a measurement, not a pass criterion.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum());
    ticks / 100.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_pods_serve_200_requests_per_second_for_10_seconds() {
    let base_port = 23_000 + (std::process::id() % 200) as u16 * 20;
    let mut sim = Command::new(env!("CARGO_BIN_EXE_model-sim"))
        .args(["--pods", "16", "--base-port", &base_port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start model-sim");
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.get(format!("http://127.0.0.1:{}/v1/models", base_port + 15)).send().await.is_err() {
        assert!(Instant::now() < deadline, "model-sim did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu_before = cpu_seconds(sim.id());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..2000u64 {
        let due = started + Duration::from_millis(i * 5);
        tokio::time::sleep_until(due.into()).await;
        let url = format!("http://127.0.0.1:{}/v1/chat/completions", base_port + (i % 16) as u16);
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let body = serde_json::json!({
                "model": "m", "max_tokens": 16,
                "messages": [{"role": "user", "content": format!("question {i}: how do GPUs batch requests?")}],
            });
            client.post(url).json(&body).send().await.map(|r| r.status().as_u16()).unwrap_or(0)
        }));
    }
    let mut ok = 0;
    for task in tasks {
        if task.await.unwrap_or(0) == 200 {
            ok += 1;
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(sim.id()) - cpu_before;
    let _ = sim.kill();
    let _ = sim.wait();
    eprintln!(
        "model-sim load: 2000 requests over {wall:.1} s to 16 pods, {ok} served; sim CPU {cpu:.2} s = {:.0}% of one core",
        100.0 * cpu / wall
    );
    assert_eq!(ok, 2000, "every request must be served");
}
