//! A raw HTTP/1.1 upload whose body is sent in two parts with a pause between them, so
//! that a test can look at the gateway while the client is still sending: what routing
//! before the body ends is about.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct Upload {
    socket: TcpStream,
    rest: Vec<u8>,
}

impl Upload {
    /// Sends a chat request's head (with the body's `content-length`) and its first
    /// `first` bytes to the gateway at `address`.
    pub async fn start(address: SocketAddr, body: &[u8], first: usize) -> Self {
        let mut socket = TcpStream::connect(address).await.expect("the gateway accepts");
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        socket.write_all(head.as_bytes()).await.expect("head sent");
        socket.write_all(&body[..first]).await.expect("first part sent");
        socket.flush().await.expect("flushed");
        Self { socket, rest: body[first..].to_vec() }
    }

    /// Sends the rest and reads the whole answer: its status and its text.
    pub async fn finish(mut self) -> (u16, String) {
        // The gateway may have answered already and closed: a failed write is its answer.
        let _ = self.socket.write_all(&self.rest).await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(20), self.socket.read_to_end(&mut answer)).await;
        let text = String::from_utf8_lossy(&answer).into_owned();
        let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        (status, text)
    }
}
