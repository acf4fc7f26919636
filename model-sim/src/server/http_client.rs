//! The calls one simulated pod makes to another (a decode pod claiming a prompt's KV,
//! the emulated llm-d sidecar sending a prefill leg): one JSON POST, read whole.

use std::sync::OnceLock;
use std::time::Duration;

/// The most response bytes kept; a prefill leg's answer is a few kilobytes.
const MAX_RESPONSE_BYTES: usize = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// One client for the process: its connection pool is shared by every pod's calls.
fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(reqwest::Client::new)
}

/// POSTs `body` as JSON to `http://{authority}{path}`. An error says what failed: no
/// connection, no answer within `timeout`, or an unreadable answer.
pub async fn post_json(authority: &str, path: &str, body: &[u8], timeout: Duration) -> Result<Reply, String> {
    let failed = |e: reqwest::Error| {
        if e.is_timeout() {
            format!("{authority} did not answer within {} s", timeout.as_secs_f64())
        } else if e.is_connect() {
            format!("cannot connect to {authority}: {e}")
        } else {
            format!("{authority}: {e}")
        }
    };
    let response = client()
        .post(format!("http://{authority}{path}"))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::ACCEPT, "application/json")
        .body(body.to_vec())
        .timeout(timeout)
        .send()
        .await
        .map_err(failed)?;
    let status = response.status().as_u16();
    let content_type =
        response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
    let body = response.bytes().await.map_err(failed)?;
    if body.len() > MAX_RESPONSE_BYTES {
        return Err(format!("{authority}: an answer of {} bytes, above {MAX_RESPONSE_BYTES}", body.len()));
    }
    Ok(Reply { status, content_type, body: body.to_vec() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_port_is_an_error_naming_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        drop(listener);
        let error = post_json(&address, "/x", b"{}", Duration::from_secs(2)).await.unwrap_err();
        assert!(error.contains(&address), "{error}");
    }

    #[tokio::test]
    async fn an_answer_keeps_its_status_type_and_body() {
        let app = axum::Router::new().route(
            "/x",
            axum::routing::post(|body: bytes::Bytes| async move {
                (axum::http::StatusCode::NOT_FOUND, [("content-type", "application/json")], body)
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let reply = post_json(&address, "/x", b"{\"a\":1}", Duration::from_secs(5)).await.unwrap();
        assert_eq!(
            reply,
            Reply { status: 404, content_type: Some("application/json".into()), body: b"{\"a\":1}".to_vec() }
        );
    }
}
