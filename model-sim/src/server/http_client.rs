//! The calls one simulated pod makes to another (a decode pod claiming a prompt's KV,
//! the emulated llm-d sidecar sending a prefill leg): one JSON POST per HTTP/1.1
//! connection, read to its end.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The most response bytes read; a prefill leg's answer is a few kilobytes.
const MAX_RESPONSE_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// POSTs `body` as JSON to `http://{authority}{path}`. An error says what failed: no
/// connection, no answer within `timeout`, or no HTTP answer.
pub async fn post_json(authority: &str, path: &str, body: &[u8], timeout: Duration) -> Result<Reply, String> {
    match tokio::time::timeout(timeout, exchange(authority, path, body)).await {
        Ok(result) => result,
        Err(_) => Err(format!("{authority} did not answer within {} s", timeout.as_secs_f64())),
    }
}

async fn exchange(authority: &str, path: &str, body: &[u8]) -> Result<Reply, String> {
    let mut stream = TcpStream::connect(authority).await.map_err(|e| format!("cannot connect to {authority}: {e}"))?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let io = |e: std::io::Error| format!("{authority}: {e}");
    stream.write_all(head.as_bytes()).await.map_err(io)?;
    stream.write_all(body).await.map_err(io)?;
    let mut raw = Vec::new();
    stream.take(MAX_RESPONSE_BYTES).read_to_end(&mut raw).await.map_err(io)?;
    parse_response(&raw).map_err(|e| format!("{authority}: {e}"))
}

fn parse_response(raw: &[u8]) -> Result<Reply, String> {
    let head_end = find(raw, b"\r\n\r\n").ok_or("the answer has no end of headers")?;
    let head = std::str::from_utf8(raw.get(..head_end).unwrap_or_default()).map_err(|_| "headers are not UTF-8")?;
    let rest = raw.get(head_end + 4..).unwrap_or_default();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP status line: {status_line:?}"))?;
    let mut content_type = None;
    let mut content_length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-type" => content_type = Some(value.to_string()),
            "content-length" => content_length = value.parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
    }
    let body = if chunked {
        dechunk(rest)?
    } else {
        match content_length {
            Some(length) => rest.get(..length).ok_or("the answer is shorter than its content-length")?.to_vec(),
            None => rest.to_vec(),
        }
    };
    Ok(Reply { status, content_type, body })
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = find(data, b"\r\n").ok_or("a chunk has no size line")?;
        let line = std::str::from_utf8(data.get(..line_end).unwrap_or_default()).unwrap_or_default();
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| format!("bad chunk size {size_text:?}"))?;
        data = data.get(line_end + 2..).unwrap_or_default();
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(data.get(..size).ok_or("a chunk is cut short")?);
        data = data.get(size + 2..).unwrap_or_default();
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sized_answer_is_read_to_its_length() {
        let raw = b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        let reply = parse_response(raw).unwrap();
        assert_eq!(reply.status, 404);
        assert_eq!(reply.content_type.as_deref(), Some("application/json"));
        assert_eq!(reply.body, b"{}");
    }

    #[test]
    fn a_chunked_answer_is_joined() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4;x=y\r\n\":1}\r\n0\r\n\r\n";
        assert_eq!(parse_response(raw).unwrap().body, b"{\"a\":1}");
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse_response(b"hello").is_err());
        assert!(parse_response(b"SSH-2.0\r\n\r\n").is_err());
    }

    #[tokio::test]
    async fn a_closed_port_is_an_error_naming_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        drop(listener);
        let error = post_json(&address, "/x", b"{}", Duration::from_secs(2)).await.unwrap_err();
        assert!(error.contains(&address), "{error}");
    }
}
