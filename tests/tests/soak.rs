//! Two minutes of the soak (`make soak` runs thirty): no error, and no sustained memory
//! growth over 5% after warm-up, in Envoy, its wasm VM or the agent.

use std::time::Duration;

use infergate_e2e::soak;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_minutes_at_70_percent_of_capacity_lose_nothing_and_leak_nothing() {
    let report = soak::run(Duration::from_secs(120), Duration::from_secs(10)).await;
    eprintln!("{}", report.markdown());
    assert!(report.requests() as f64 >= report.offered_rps * 100.0, "the offered load was not kept up");
    assert!(report.failures().is_empty(), "{:?}", report.failures());
}
