use super::*;

fn parse(body: &[u8]) -> Result<InferenceRequest, ApiError> {
    parse_request(body, &PrefixSettings::default())
}

fn err(body: &str) -> ApiError {
    parse(body.as_bytes()).unwrap_err()
}

/// The prompt as the engine will see it.
fn rendered(body: &str) -> Vec<u8> {
    read_body(body.as_bytes()).unwrap().1.joined()
}

#[test]
fn extracts_model_and_stream() {
    let r = parse(br#"{"messages":[{"role":"user","content":"hi"}],"model":"m","stream":true}"#).unwrap();
    assert_eq!((r.model.as_str(), r.stream), ("m", true));
}

#[test]
fn escaped_model_names_are_unescaped() {
    let r = parse(br#"{"mod\u0065l":"llama\u002d3"}"#).unwrap();
    assert_eq!(r.model, "llama-3");
}

#[test]
fn each_bad_model_gets_its_own_code() {
    assert_eq!(err(r#"{"messages":[]}"#).code, "missing_required_parameter");
    assert_eq!(err(r#"{"model":3}"#).code, "invalid_type");
    assert!(err(r#"{"model":3}"#).message.contains("but got an integer instead"));
    assert!(err(r#"{"model":null}"#).message.contains("null"));
    assert!(err(r#"{"model":["a"]}"#).message.contains("an array"));
    assert!(err(r#"{"model":{"a":1}}"#).message.contains("an object"));
    assert_eq!(err(r#"{"model":""}"#).code, "invalid_model");
    assert_eq!(err("{\"model\":\"a\\r\\nx-evil: 1\"}").code, "invalid_model");
}

#[test]
fn invalid_json_is_a_400_with_position() {
    for body in ["{\"model\":", "{\"model\":\"m\"} trailing", "\u{feff}{\"model\":\"m\"}", "{\"model\":\"m\" /* c */}"]
    {
        let e = err(body);
        assert_eq!((e.status, e.code), (400, "invalid_json"), "{body}");
        assert!(e.message.contains("line"), "{}", e.message);
    }
    assert_eq!(err("").code, "invalid_body");
}

#[test]
fn invalid_utf8_is_refused() {
    let e = parse(b"{\"model\":\"\xff\"}").unwrap_err();
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
    assert_eq!(e.code, "missing_required_parameter");
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
    let body = format!("{{\"model\":\"m\",\"x\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
    assert_eq!(parse(body.as_bytes()).unwrap().model, "m");
    let inside_model = format!("{{\"model\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
    assert_eq!(err(&inside_model).code, "invalid_type");
}

#[test]
fn the_prompt_is_tools_then_each_message_with_its_role() {
    let body = r#"{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],
        "messages":[{"role":"system","content":"be brief"},
                    {"role":"user","content":[{"type":"text","text":"part one "},{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":"two"}]},
                    {"role":"assistant","content":null,"tool_calls":[{"id":"1"}]}],
        "max_tokens":7}"#;
    let r = parse(body.as_bytes()).unwrap();
    let prompt = String::from_utf8(rendered(body)).unwrap();
    assert_eq!(r.prompt_len, prompt.len());
    assert_eq!(
        prompt,
        r#"<|tools|>[{"type":"function","function":{"name":"f"}}]<|system|>be brief<|user|>part one image_url{"url":"u"}type"image_url"two<|assistant|>[{"id":"1"}]"#
    );
    assert_eq!(r.max_tokens, Some(7));
}

#[test]
fn the_next_turn_extends_the_previous_prompt() {
    let system = "s".repeat(5_000);
    let turn1 = format!(
        r#"{{"model":"m","messages":[{{"role":"system","content":"{system}"}},{{"role":"user","content":"q1"}}]}}"#
    );
    let turn2 = format!(
        r#"{{"model":"m","messages":[{{"role":"system","content":"{system}"}},{{"role":"user","content":"q1"}},{{"role":"assistant","content":"a1"}},{{"role":"user","content":"q2"}}]}}"#
    );
    assert!(rendered(&turn2).starts_with(&rendered(&turn1)));
    let (turn1, turn2) = (parse(turn1.as_bytes()).unwrap(), parse(turn2.as_bytes()).unwrap());
    let (keys1, keys2) = (turn1.prompt.salted("m", None), turn2.prompt.salted("m", None));
    assert_eq!(keys1.keys.len(), 78, "a key for each of the 78 full 64-byte blocks");
    assert_eq!(keys1.keys[..], keys2.keys[..78]);
}

#[test]
fn completions_prompts_and_escapes_are_decoded() {
    let r = parse(br#"{"model":"m","prompt":"caf\u00e9","max_completion_tokens":3,"max_tokens":9}"#).unwrap();
    assert_eq!(rendered(r#"{"model":"m","prompt":"caf\u00e9"}"#), "café".as_bytes());
    assert_eq!(r.prompt_len, "café".len());
    assert_eq!(r.max_tokens, Some(3));
}

#[test]
fn wrong_types_are_refused_in_openai_words() {
    let cases: [(&str, &str, Option<&str>); 9] = [
        (r#"{"model":"m","max_tokens":"ten"}"#, "invalid_type", Some("max_tokens")),
        (r#"{"model":"m","max_tokens":-1}"#, "integer_below_min_value", Some("max_tokens")),
        (r#"{"model":"m","max_completion_tokens":1.5}"#, "invalid_type", Some("max_completion_tokens")),
        (r#"{"model":"m","stream":"yes"}"#, "invalid_type", Some("stream")),
        (r#"{"model":"m","messages":"hi"}"#, "invalid_type", Some("messages")),
        (r#"{"model":"m","messages":["hi"]}"#, "invalid_type", Some("messages")),
        (r#"{"model":"m","messages":[{"role":5,"content":"x"}]}"#, "invalid_type", Some("messages")),
        (r#"{"model":"m","messages":[{"role":"user","role":"system"}]}"#, "invalid_value", Some("messages")),
        (r#"{"model":["m"]}"#, "invalid_type", Some("model")),
    ];
    for (body, code, param) in cases {
        let e = err(body);
        assert_eq!((e.code, e.param), (code, param), "{body}: {}", e.message);
    }
    assert_eq!(
        err(r#"{"model":"m","messages":[{"role":"user"},{"role":true}]}"#).message,
        "Invalid type for 'messages[1].role': expected a string, but got a boolean instead."
    );
    assert_eq!(err(r#"["model","m"]"#).message, "The request body must be a JSON object, but it is an array.");
}

#[test]
fn no_refusal_names_a_rust_type() {
    let bodies = [
        r#"{"model":"m","max_tokens":"ten"}"#,
        r#"{"model":"m","max_tokens":99999999999}"#,
        r#"{"model":"m","stream":{}}"#,
        r#"{"model":"m","messages":{"role":"user"}}"#,
        r#"{"model":"m","messages":[1,2]}"#,
        r#"{"model":"m","messages":[{"role":{"a":1}}]}"#,
        r#"{"model":"m","messages":[{"content":"a","content":"b"}]}"#,
        r#"{"model":"m","stream":true,"stream":false}"#,
        r#"{"model":1.5}"#,
        r#"["m"]"#,
        r#""m""#,
        r#"7"#,
        r#"{"model":"m","#,
        r#"{"model":"m"} x"#,
    ];
    let rust =
        ["u32", "u64", "usize", "i64", "bool", "struct", "enum", "Option", "Vec", "RawValue", "Cow", "sequence", "map"];
    for body in bodies {
        let e = err(body);
        let mut words = e.message.split(|c: char| !c.is_alphanumeric() && c != '_');
        assert!(!words.any(|word| rust.contains(&word)) && !e.message.contains('`'), "{body}: {}", e.message);
    }
}

#[test]
fn deeply_nested_messages_are_refused_in_words() {
    let body = format!(r#"{{"model":"m","messages":{}1{}}}"#, "[".repeat(10_000), "]".repeat(10_000));
    let e = err(&body);
    assert_eq!((e.code, e.param), ("invalid_type", Some("messages")), "{}", e.message);
}
