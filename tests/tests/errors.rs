//! Bad requests get OpenAI-shaped errors from the filter, and the VM survives them.

use infergate_e2e::{Stack, StackSpec};

/// One bad (or odd) request and what the gateway must answer.
struct Case {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    /// `error.code` of a refusal; `None` for a request that must reach a pod.
    code: Option<&'static str>,
}

fn case(name: &'static str, body: impl Into<Vec<u8>>, status: u16, code: Option<&'static str>) -> Case {
    Case {
        name,
        method: "POST",
        path: "/v1/chat/completions",
        content_type: Some("application/json"),
        body: body.into(),
        status,
        code,
    }
}

const LIMIT: u64 = 64 * 1024;

/// A valid chat body of exactly `size` bytes.
fn body_of_size(size: usize) -> Vec<u8> {
    let head = r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":""#;
    let tail = r#""}]}"#;
    let mut body = head.as_bytes().to_vec();
    body.extend(std::iter::repeat_n(b'a', size - head.len() - tail.len()));
    body.extend_from_slice(tail.as_bytes());
    assert_eq!(body.len(), size);
    body
}

fn cases() -> Vec<Case> {
    let ok = Some;
    let deep_messages = format!(r#"{{"model":"m","messages":{}1{}}}"#, "[".repeat(10_000), "]".repeat(10_000));
    let deep_unknown = format!(r#"{{"model":"m","max_tokens":1,"x":{}1{}}}"#, "[".repeat(10_000), "]".repeat(10_000));
    let many_messages = format!(
        r#"{{"model":"m","max_tokens":1,"messages":[{}]}}"#,
        vec![r#"{"role":"user","content":"hi"}"#; 1500].join(",")
    );
    vec![
        // Invalid JSON.
        case("truncated", r#"{"model":"m","messages":[{"role":"#, 400, ok("invalid_json")),
        case("trailing garbage", r#"{"model":"m"} xyz"#, 400, ok("invalid_json")),
        case("two documents", r#"{"model":"m"}{"model":"m"}"#, 400, ok("invalid_json")),
        case("byte order mark", [&[0xEF, 0xBB, 0xBF][..], br#"{"model":"m"}"#].concat(), 400, ok("invalid_json")),
        case("line comment", "{\"model\":\"m\" // pick m\n}", 400, ok("invalid_json")),
        case("block comment", r#"{/* a */"model":"m"}"#, 400, ok("invalid_json")),
        case("single quotes", "{'model':'m'}", 400, ok("invalid_json")),
        case("trailing comma", r#"{"model":"m",}"#, 400, ok("invalid_json")),
        case("not an object", r#"["model","m"]"#, 400, ok("invalid_json")),
        case("bare string", r#""m""#, 400, ok("invalid_json")),
        case(
            "invalid UTF-8 in a value",
            [&br#"{"model":"m","x":""#[..], &[0xFF, 0xFE], br#""}"#].concat(),
            400,
            ok("invalid_json"),
        ),
        case(
            "invalid UTF-8 in the model",
            [&br#"{"model":"m"#[..], &[0xC3, 0x28], br#""}"#].concat(),
            400,
            ok("invalid_json"),
        ),
        case("a lone surrogate escape", r#"{"model":"\ud800"}"#, 400, ok("invalid_json")),
        case("10,000 levels deep in messages", deep_messages, 400, ok("invalid_type")),
        case("NaN literal", r#"{"model":"m","temperature":NaN}"#, 400, ok("invalid_json")),
        // The model field.
        case("missing model", r#"{"messages":[]}"#, 400, ok("missing_required_parameter")),
        case("model a number", r#"{"model":42}"#, 400, ok("invalid_type")),
        case("model null", r#"{"model":null}"#, 400, ok("invalid_type")),
        case("model an array", r#"{"model":["m"]}"#, 400, ok("invalid_type")),
        case("model an object", r#"{"model":{"name":"m"}}"#, 400, ok("invalid_type")),
        case("model a boolean", r#"{"model":true}"#, 400, ok("invalid_type")),
        case("model empty", r#"{"model":""}"#, 400, ok("invalid_model")),
        case("model over 256 bytes", format!(r#"{{"model":"{}"}}"#, "m".repeat(300)), 400, ok("invalid_model")),
        case("duplicate model key", r#"{"model":"m","model":"other"}"#, 400, ok("invalid_json")),
        case(
            "model only inside tools",
            r#"{"tools":[{"type":"function","function":{"name":"f","parameters":{"model":"m"}}}]}"#,
            400,
            ok("missing_required_parameter"),
        ),
        case("CR/LF in the model", "{\"model\":\"m\\r\\nx-evil: 1\"}", 400, ok("invalid_model")),
        case("NUL in the model", r#"{"model":"m\u0000"}"#, 400, ok("invalid_model")),
        case("tab in the model", r#"{"model":"m\tx"}"#, 400, ok("invalid_model")),
        case("unknown model", r#"{"model":"nope"}"#, 404, ok("model_not_found")),
        case("escaped unknown model", r#"{"model":"llama\u002d3"}"#, 404, ok("model_not_found")),
        case("stream a string", r#"{"model":"m","stream":"yes"}"#, 400, ok("invalid_type")),
        case("stream a number", r#"{"model":"m","stream":1}"#, 400, ok("invalid_type")),
        case("messages not an array", r#"{"model":"m","messages":"hi"}"#, 400, ok("invalid_type")),
        case("a message not an object", r#"{"model":"m","messages":["hi"]}"#, 400, ok("invalid_type")),
        case("a role not a string", r#"{"model":"m","messages":[{"role":1,"content":"x"}]}"#, 400, ok("invalid_type")),
        case("max_tokens a string", r#"{"model":"m","max_tokens":"ten"}"#, 400, ok("invalid_type")),
        case("max_tokens negative", r#"{"model":"m","max_tokens":-1}"#, 400, ok("integer_below_min_value")),
        case("max_tokens past 2^32", r#"{"model":"m","max_tokens":4294967296}"#, 400, ok("integer_above_max_value")),
        // Sizes and framing.
        case("empty body", "", 400, ok("invalid_body")),
        case("one byte over the limit", body_of_size(LIMIT as usize + 1), 413, ok("request_too_large")),
        case("10 MiB", body_of_size(10 * 1024 * 1024), 413, ok("request_too_large")),
        Case { method: "GET", ..case("GET with a body", r#"{"model":"m"}"#, 404, ok("unknown_url")) },
        Case {
            path: "/v1/chat/completions/../../admin",
            ..case("path traversal", r#"{"model":"m"}"#, 404, ok("unknown_url"))
        },
        // Accepted, and routed: JSON escapes are the same text, unknown fields belong
        // to the model server, and the content type is not checked (model servers
        // do not check it either).
        case("escaped key", r#"{"mod\u0065l":"m","max_tokens":1}"#, 200, None),
        case("escaped value", r#"{"model":"\u006d","max_tokens":1}"#, 200, None),
        case("unknown fields", r#"{"model":"m","max_tokens":1,"x_vendor":{"a":[1,2]}}"#, 200, None),
        case("exactly at the limit", body_of_size(LIMIT as usize), 200, None),
        case("1,500 messages", many_messages, 200, None),
        // A field the gateway does not read is skipped without recursion, whatever its
        // depth; the model server judges it.
        case("10,000 levels deep in an unknown field", deep_unknown, 200, None),
        Case { content_type: None, ..case("no content type", r#"{"model":"m","max_tokens":1}"#, 200, None) },
        Case {
            content_type: Some("text/plain"),
            ..case("wrong content type", r#"{"model":"m","max_tokens":1}"#, 200, None)
        },
    ]
}

/// A refusal speaks JSON's words, never the gateway's language's: no Rust type names.
fn assert_no_rust_words(name: &str, body: &str) {
    let rust = ["u32", "u64", "usize", "i64", "bool", "struct", "enum", "Option", "Vec", "RawValue", "Cow", "sequence"];
    let message = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("{name}: no error message in {body}"));
    let mut words = message.split(|c: char| !c.is_alphanumeric() && c != '_');
    assert!(!words.any(|word| rust.contains(&word)), "{name}: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_their_status_and_an_openai_error_and_the_vm_survives() {
    every_case_answered(false).await;
}

/// The same table through Envoy's ext_proc and `infergate-epp` instead of the filter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_picker_over_ext_proc_answers_every_case_as_the_filter_does() {
    every_case_answered(true).await;
}

async fn every_case_answered(ext_proc: bool) {
    // Near-instant pods: the point is the gateway, and a 64 KiB prompt would not fit the
    // tiny simulated KV cache.
    let stack =
        Stack::start(StackSpec { max_body_bytes: LIMIT, instant_pods: true, ext_proc, ..StackSpec::default() }).await;
    let cases = cases();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let total = cases.len();
    let refusals = cases.iter().filter(|c| c.code.is_some()).count();
    for case in cases {
        let mut request = stack
            .client()
            .request(case.method.parse().unwrap(), format!("{}{}", stack.gateway_url, case.path))
            .body(case.body);
        if let Some(content_type) = case.content_type {
            request = request.header("content-type", content_type);
        }
        let reply = infergate_e2e::client::read_reply(request.send().await.expect("the gateway answers")).await;
        let name = case.name;
        assert_eq!(reply.status, case.status, "{name}: {}", reply.body);
        match case.code {
            Some(code) => {
                assert_eq!(reply.error_code(), code, "{name}: {}", reply.body);
                assert_no_rust_words(name, &reply.body);
                assert_eq!(reply.header("content-type"), Some("application/json"), "{name}");
                assert!(reply.served_by().is_none(), "{name} must not reach a pod");
            }
            None => assert!(reply.served_by().is_some(), "{name} must reach a pod"),
        }
        // The VMs survived: good requests still succeed (two, so that both workers
        // are likely to serve one).
        for _ in 0..2 {
            assert_eq!(stack.chat("m", 1).await.status, 200, "after {name}");
        }
    }
    if ext_proc {
        // The picker answered them all, not Envoy on its own: every refusal is its
        // immediate response, and every good request its decision.
        let rejected = stack.picker_metric("infergate_epp_rejected_total").await;
        let decisions = stack.picker_metric("infergate_epp_decisions_total").await.unwrap_or(0);
        assert_eq!(rejected, Some(refusals as u64));
        assert!(decisions >= 2 * total as u64, "{decisions} decisions for {total} cases");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_are_404_and_a_body_over_the_limit_without_length_is_413() {
    for ext_proc in [false, true] {
        unknown_path_and_chunked_limit(ext_proc).await;
    }
}

async fn unknown_path_and_chunked_limit(ext_proc: bool) {
    let spec = StackSpec { max_body_bytes: 64 * 1024, start_agent: false, ext_proc, ..StackSpec::default() };
    let stack = Stack::start(spec).await;
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
