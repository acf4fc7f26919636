//! Bad requests get OpenAI-shaped errors from the filter, and the VM survives them.

use infergate_e2e::{Stack, StackSpec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_their_status_and_an_openai_error() {
    let stack = Stack::start(StackSpec { max_body_bytes: 64 * 1024, ..StackSpec::default() }).await;
    let oversized = format!(r#"{{"model":"m","prompt":"{}"}}"#, "x".repeat(100 * 1024));
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("invalid JSON", "{\"model\": ".into(), 400, "invalid_json"),
        ("missing model", r#"{"messages":[]}"#.into(), 400, "missing_model"),
        ("numeric model", r#"{"model":42}"#.into(), 400, "invalid_model"),
        ("unknown model", r#"{"model":"nope"}"#.into(), 404, "model_not_found"),
        ("oversized body", oversized, 413, "request_too_large"),
        ("CR/LF in model", "{\"model\":\"m\\r\\nx-evil: 1\"}".into(), 400, "invalid_model"),
        ("empty body", String::new(), 400, "invalid_body"),
    ];
    for (name, body, status, code) in cases {
        let reply = stack.post("/v1/chat/completions", body, &[]).await;
        assert_eq!(reply.status, status, "{name}: {}", reply.body);
        assert_eq!(reply.error_code(), code, "{name}");
        assert_eq!(reply.header("content-type"), Some("application/json"), "{name}");
        assert!(reply.served_by().is_none(), "{name} must not reach a pod");
    }
    // The VMs survived: good requests still succeed on both workers.
    for _ in 0..10 {
        assert_eq!(stack.chat("m", 1).await.status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_are_404_and_a_body_over_the_limit_without_length_is_413() {
    let stack = Stack::start(StackSpec { max_body_bytes: 64 * 1024, start_agent: false, ..StackSpec::default() }).await;
    let reply = stack.post("/v1/unknown", "{}", &[]).await;
    assert_eq!((reply.status, reply.error_code().as_str()), (404, "unknown_url"));

    // A chunked body (no content-length) is counted as it arrives.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..40).map(|_| Ok(vec![b' '; 4096])).collect();
    let body = reqwest::Body::wrap_stream(futures_stream(chunks));
    let reply = stack.post("/v1/chat/completions", body, &[]).await;
    assert_eq!((reply.status, reply.error_code().as_str()), (413, "request_too_large"));
}

fn futures_stream(
    items: Vec<Result<Vec<u8>, std::io::Error>>,
) -> impl futures_core_stream::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures_core_stream::iter(items)
}

mod futures_core_stream {
    pub use futures::stream::{Stream, iter};
}
