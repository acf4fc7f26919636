//! A client that uploads its body at a bounded rate, as one on a real network does:
//! what matters then is the time from the body's last byte leaving the client to the
//! answer's first byte, which is what routing before the body ends can shorten.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use infergate_harness::Stack;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{chat_body, latency_histogram};

/// The upload's pace: `piece` bytes, then a pause of `pause`.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    pub piece: usize,
    pub pause: Duration,
}

/// Last byte sent to first byte of the answer, over `count` sequential requests.
#[derive(Debug, Clone)]
pub struct PacedCell {
    pub config: &'static str,
    pub body_bytes: usize,
    pub requests: u64,
    pub errors: u64,
    pub p50_us: u64,
    pub p99_us: u64,
}

/// One request on its own connection; the time from its last byte to the first byte
/// of a `200` answer, or `None` for any other outcome.
async fn one(stack: &Stack, body: &[u8], pace: Pace) -> Option<Duration> {
    let address = stack.config.gateway.listen;
    let mut socket = TcpStream::connect(address).await.ok()?;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await.ok()?;
    let mut pieces = body.chunks(pace.piece.max(1)).peekable();
    while let Some(piece) = pieces.next() {
        socket.write_all(piece).await.ok()?;
        if pieces.peek().is_some() {
            tokio::time::sleep(pace.pause).await;
        }
    }
    let last_byte = Instant::now();
    let mut first = [0u8; 12];
    socket.read_exact(&mut first).await.ok()?;
    let elapsed = last_byte.elapsed();
    let mut rest = Vec::new();
    let _ = socket.read_to_end(&mut rest).await;
    first.starts_with(b"HTTP/1.1 200").then_some(elapsed)
}

pub async fn measure(stack: &Stack, config: &'static str, body_bytes: usize, pace: Pace, count: u64) -> PacedCell {
    let mut histogram: Histogram<u64> = latency_histogram();
    let mut errors = 0;
    for sequence in 0..count {
        let body = chat_body(body_bytes, sequence + 1);
        match one(stack, &body, pace).await {
            Some(elapsed) => {
                let _ = histogram.record(elapsed.as_micros() as u64);
            }
            None => errors += 1,
        }
    }
    PacedCell {
        config,
        body_bytes,
        requests: histogram.len(),
        errors,
        p50_us: histogram.value_at_quantile(0.5),
        p99_us: histogram.value_at_quantile(0.99),
    }
}

pub fn markdown(cells: &[PacedCell], pace: Pace) -> String {
    let mut out = format!(
        "Paced uploads ({} KiB every {} ms, one request at a time): last byte sent to first byte of the answer\n\n| body | p50 A / F / B / C (µs) | p99 A / F / B / C (µs) | errors A/F/B/C |\n|---:|---:|---:|---:|\n",
        pace.piece / 1024,
        pace.pause.as_millis()
    );
    for a in cells.iter().filter(|c| c.config == "A") {
        let find = |config: &str| cells.iter().find(|c| c.config == config && c.body_bytes == a.body_bytes);
        let (Some(f), Some(b), Some(c)) = (find("F"), find("B"), find("C")) else { continue };
        let all = [a, f, b, c];
        let join = |value: fn(&PacedCell) -> u64, separator: &str| {
            all.iter().map(|cell| value(cell).to_string()).collect::<Vec<_>>().join(separator)
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            super::size_label(a.body_bytes),
            join(|c| c.p50_us, " / "),
            join(|c| c.p99_us, " / "),
            join(|c| c.errors, "/"),
        ));
    }
    out
}
