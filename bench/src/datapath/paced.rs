//! A client that uploads its body at a bounded rate, as one on a real network does:
//! what matters then is what is left to do after the body's last byte leaves the
//! client, which routing before the body ends, and work done as the chunks arrive,
//! can shorten. Two times per request, both from the last byte sent: until the pod got
//! the request's headers (Envoy sends them upstream once the route is chosen; negative
//! when it chose before the body ended), and until the answer's first byte. Both key
//! orders: `model` first, and `model` last as the OpenAI Python SDK writes it.

use std::time::{Duration, Instant};

use infergate_harness::Stack;
use infergate_harness::fleet::ARRIVAL_HEADER;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{KeyOrder, chat_body_in};

/// The upload's pace: `piece` bytes, then a pause of `pause`.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    pub piece: usize,
    pub pause: Duration,
}

/// Over `count` sequential requests of one size and key order, microseconds from the
/// last byte sent.
#[derive(Debug, Clone, Serialize)]
pub struct PacedCell {
    #[serde(rename = "gateway")]
    pub config: &'static str,
    pub body_bytes: usize,
    pub order: KeyOrder,
    pub requests: u64,
    pub errors: u64,
    /// To the pod's receipt of the request's headers.
    pub upstream_p50_us: i64,
    pub upstream_p99_us: i64,
    /// To the first byte of the answer.
    pub p50_us: i64,
    pub p99_us: i64,
}

/// Microseconds from `from` to `to`, negative when `to` came first.
fn signed_us(from: Instant, to: Instant) -> i64 {
    match to.checked_duration_since(from) {
        Some(after) => i64::try_from(after.as_micros()).unwrap_or(i64::MAX),
        None => -i64::try_from(from.duration_since(to).as_micros()).unwrap_or(i64::MAX),
    }
}

/// One request on its own connection; from its last byte, the pod's receipt of its
/// headers and the first byte of a `200` answer, or `None` for any other outcome.
async fn one(stack: &Stack, id: &str, body: &[u8], pace: Pace) -> Option<(i64, i64)> {
    let address = stack.config.gateway.listen;
    let mut socket = TcpStream::connect(address).await.ok()?;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n{ARRIVAL_HEADER}: {id}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
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
    let answered = signed_us(last_byte, Instant::now());
    let mut rest = Vec::new();
    let _ = socket.read_to_end(&mut rest).await;
    let upstream = signed_us(last_byte, stack.fleet.arrival(id)?);
    first.starts_with(b"HTTP/1.1 200").then_some((upstream, answered))
}

/// The value at `quantile` of sorted `values`, 0 when empty.
fn at(values: &[i64], quantile: f64) -> i64 {
    let index = ((values.len() as f64 - 1.0) * quantile).round() as usize;
    values.get(index).copied().unwrap_or(0)
}

pub async fn measure(
    stack: &Stack,
    config: &'static str,
    body_bytes: usize,
    order: KeyOrder,
    pace: Pace,
    count: u64,
) -> PacedCell {
    let (mut upstream, mut answered) = (Vec::new(), Vec::new());
    let mut errors = 0;
    for sequence in 0..count {
        let body = chat_body_in(body_bytes, sequence + 1, order);
        let id = format!("{config}-{body_bytes}-{order:?}-{sequence}");
        match one(stack, &id, &body, pace).await {
            Some((to_upstream, to_answer)) => {
                upstream.push(to_upstream);
                answered.push(to_answer);
            }
            None => errors += 1,
        }
    }
    upstream.sort_unstable();
    answered.sort_unstable();
    PacedCell {
        config,
        body_bytes,
        order,
        requests: answered.len() as u64,
        errors,
        upstream_p50_us: at(&upstream, 0.5),
        upstream_p99_us: at(&upstream, 0.99),
        p50_us: at(&answered, 0.5),
        p99_us: at(&answered, 0.99),
    }
}

pub fn markdown(cells: &[PacedCell], pace: Pace) -> String {
    let mut out = format!(
        "Paced uploads ({} KiB every {} ms, one request at a time), µs from the last byte sent: to the pod's receipt of the request (negative: sent upstream before the body ended), and to the answer's first byte\n\n| body | key order | to upstream p50 A / F / B / C | to upstream p99 A / F / B / C | to answer p50 A / F / B / C | to answer p99 A / F / B / C | errors A/F/B/C |\n|---:|---|---:|---:|---:|---:|---:|\n",
        pace.piece / 1024,
        pace.pause.as_millis()
    );
    for a in cells.iter().filter(|c| c.config == "A") {
        let find = |config: &str| {
            cells.iter().find(|c| c.config == config && c.body_bytes == a.body_bytes && c.order == a.order)
        };
        let (Some(f), Some(b), Some(c)) = (find("F"), find("B"), find("C")) else { continue };
        let all = [a, f, b, c];
        let join = |value: fn(&PacedCell) -> i64, separator: &str| {
            all.iter().map(|cell| value(cell).to_string()).collect::<Vec<_>>().join(separator)
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            super::size_label(a.body_bytes),
            a.order.label(),
            join(|c| c.upstream_p50_us, " / "),
            join(|c| c.upstream_p99_us, " / "),
            join(|c| c.p50_us, " / "),
            join(|c| c.p99_us, " / "),
            join(|c| c.errors as i64, "/"),
        ));
    }
    out
}
