//! Many streams open at once: N clients, each on its own connection, send one 4 KiB
//! request together to pods that hold every answer for the same time, so that N
//! requests are in the gateway at once. What counts is whether any fails, and how much
//! longer than the hold the slowest took.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use infergate_harness::Stack;
use infergate_harness::fleet::HOLD_HEADER;

use super::{chat_body, latency_histogram};

#[derive(Debug, Clone)]
pub struct StreamsCell {
    pub config: &'static str,
    pub streams: usize,
    pub ok: u64,
    pub errors: u64,
    /// The first error seen, for the report.
    pub first_error: Option<String>,
    /// Beyond the hold, microseconds.
    pub p50_extra_us: u64,
    pub p99_extra_us: u64,
}

pub async fn measure(stack: &Stack, config: &'static str, streams: usize, hold: Duration) -> StreamsCell {
    let url = format!("{}/v1/chat/completions", stack.gateway_url);
    let body = Arc::new(chat_body(4096, 1));
    let hold_ms = hold.as_millis().to_string();
    let mut tasks = Vec::with_capacity(streams);
    for _ in 0..streams {
        let (url, body, hold_ms) = (url.clone(), Arc::clone(&body), hold_ms.clone());
        tasks.push(tokio::spawn(async move {
            // A client per stream: its own connection, as N separate users would have.
            let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap_or_default();
            let started = Instant::now();
            let sent = client
                .post(url)
                .header("content-type", "application/json")
                .header(HOLD_HEADER, hold_ms)
                .body(body.as_ref().clone())
                .send()
                .await;
            let outcome = match sent {
                Ok(response) if response.status().is_success() => {
                    response.bytes().await.map(|_| ()).map_err(|e| e.to_string())
                }
                Ok(response) => {
                    let status = response.status();
                    Err(format!("{status}: {}", response.text().await.unwrap_or_default()))
                }
                Err(e) => Err(e.to_string()),
            };
            (outcome, started.elapsed())
        }));
    }
    let mut histogram: Histogram<u64> = latency_histogram();
    let (mut ok, mut errors, mut first_error) = (0, 0, None);
    for task in tasks {
        match task.await {
            Ok((Ok(()), elapsed)) => {
                ok += 1;
                let _ = histogram.record(elapsed.saturating_sub(hold).as_micros().max(1) as u64);
            }
            Ok((Err(error), _)) => {
                errors += 1;
                first_error.get_or_insert(error);
            }
            Err(join) => {
                errors += 1;
                first_error.get_or_insert(join.to_string());
            }
        }
    }
    StreamsCell {
        config,
        streams,
        ok,
        errors,
        first_error,
        p50_extra_us: histogram.value_at_quantile(0.5),
        p99_extra_us: histogram.value_at_quantile(0.99),
    }
}

pub fn markdown(cells: &[StreamsCell], hold: Duration) -> String {
    let mut out = format!(
        "Concurrent streams (every request held {} ms by its pod, all sent at once): errors, and time beyond the hold\n\n| streams | gateway | ok | errors | p50 beyond the hold (µs) | p99 beyond the hold (µs) | first error |\n|---:|---|---:|---:|---:|---:|---|\n",
        hold.as_millis()
    );
    for cell in cells {
        let name = match cell.config {
            "A" => "A plain",
            "F" => "F Wasm floor",
            "B" => "B filter",
            _ => "C ext_proc picker",
        };
        out.push_str(&format!(
            "| {} | {name} | {} | {} | {} | {} | {} |\n",
            cell.streams,
            cell.ok,
            cell.errors,
            cell.p50_extra_us,
            cell.p99_extra_us,
            cell.first_error.as_deref().unwrap_or("").chars().take(80).collect::<String>()
        ));
    }
    out
}
