use super::*;

fn err(body: &str) -> ApiError {
    parse_request(body.as_bytes()).unwrap_err()
}

#[test]
fn extracts_model_and_stream() {
    let r = parse_request(
        br#"{"messages":[{"role":"user","content":"hi"}],"model":"m","stream":true}"#,
    )
    .unwrap();
    assert_eq!(
        r,
        InferenceRequest {
            model: "m".into(),
            stream: true
        }
    );
}

#[test]
fn escaped_model_names_are_unescaped() {
    let r = parse_request(br#"{"mod\u0065l":"llama\u002d3"}"#).unwrap();
    assert_eq!(r.model, "llama-3");
}

#[test]
fn each_bad_model_gets_its_own_code() {
    assert_eq!(err(r#"{"messages":[]}"#).code, "missing_model");
    assert_eq!(err(r#"{"model":3}"#).code, "invalid_model");
    assert!(err(r#"{"model":3}"#).message.contains("a number"));
    assert!(err(r#"{"model":null}"#).message.contains("null"));
    assert!(err(r#"{"model":["a"]}"#).message.contains("an array"));
    assert!(err(r#"{"model":{"a":1}}"#).message.contains("an object"));
    assert_eq!(err(r#"{"model":""}"#).code, "invalid_model");
    assert_eq!(
        err("{\"model\":\"a\\r\\nx-evil: 1\"}").code,
        "invalid_model"
    );
}

#[test]
fn invalid_json_is_a_400_with_position() {
    for body in [
        "{\"model\":",
        "{\"model\":\"m\"} trailing",
        "\u{feff}{\"model\":\"m\"}",
        "{\"model\":\"m\" /* c */}",
    ] {
        let e = err(body);
        assert_eq!((e.status, e.code), (400, "invalid_json"), "{body}");
        assert!(e.message.contains("line"), "{}", e.message);
    }
    assert_eq!(err("").code, "invalid_body");
}

#[test]
fn invalid_utf8_is_refused() {
    let e = parse_request(b"{\"model\":\"\xff\"}").unwrap_err();
    assert_eq!(e.code, "invalid_json");
}

#[test]
fn duplicate_model_key_is_refused() {
    let e = err(r#"{"model":"a","model":"b"}"#);
    assert_eq!((e.code, e.param), ("invalid_json", Some("model")));
}

#[test]
fn model_nested_elsewhere_does_not_count() {
    let e = err(r#"{"tools":[{"function":{"parameters":{"model":"m"}}}]}"#);
    assert_eq!(e.code, "missing_model");
}

#[test]
fn non_boolean_stream_is_refused() {
    let e = err(r#"{"model":"m","stream":"yes"}"#);
    assert_eq!(e.param, Some("stream"));
}

#[test]
fn deep_nesting_is_skipped_without_recursion() {
    // Fields other than `model` and `stream` are skipped iteratively, so depth costs no
    // stack; the model server judges them.
    let body = format!(
        "{{\"model\":\"m\",\"x\":{}{}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    assert_eq!(parse_request(body.as_bytes()).unwrap().model, "m");
    let inside_model = format!("{{\"model\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
    assert_eq!(err(&inside_model).code, "invalid_model");
}
