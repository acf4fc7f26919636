use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::request::parse_request;

const CAP: usize = 64;

/// Hashing in 4-byte blocks, of the prompt's first `cap` bytes.
fn prefix(cap: usize) -> PrefixSettings {
    PrefixSettings { block_chars: 4, max_blocks: (cap / 4) as u32, ..PrefixSettings::default() }
}

fn scan(chunks: &[&[u8]], cap: usize) -> ScanOutcome {
    let mut scanner = RequestScanner::new(&prefix(cap));
    for chunk in chunks {
        scanner.feed(chunk);
    }
    scanner.finish()
}

/// The whole-body parser's answer, hashing as far as the scanner does.
fn expected(body: &[u8], cap: usize) -> Result<InferenceRequest, ApiError> {
    parse_request(body, &prefix(cap))
}

/// Scans `body` cut at every pair of points (or a sample of them, for long bodies);
/// returns whether the scanner read it itself.
fn agrees_at_every_cut(body: &[u8], cap: usize) -> bool {
    let want = expected(body, cap);
    let step = (body.len() / 40).max(1);
    let mut read = None;
    for first in (0..=body.len()).step_by(step) {
        for second in (first..=body.len()).step_by(step) {
            let outcome = scan(&[&body[..first], &body[first..second], &body[second..]], cap);
            let this = match outcome {
                ScanOutcome::Read(got) => {
                    assert_eq!(got, want, "cut at {first}/{second}: {}", String::from_utf8_lossy(body));
                    true
                }
                ScanOutcome::NeedsFullParse => false,
            };
            assert_eq!(*read.get_or_insert(this), this, "the cut changed the outcome at {first}/{second}");
        }
    }
    read.unwrap_or(false)
}

fn chat_bodies() -> Vec<serde_json::Value> {
    vec![
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        json!({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a\"b\\c\n\u{e9}\u{1F600}"}],
               "model": "llama-3", "stream": true, "max_tokens": 7}),
        json!({"model": "m", "max_completion_tokens": 9, "max_tokens": 3, "messages": []}),
        json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "look"},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}),
        json!({"model": "m", "messages": [{"role": "assistant", "content": null,
               "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "42"}],
               "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}),
        json!({"model": "m", "prompt": "Once upon a time", "temperature": 0.5, "stop": ["\n"], "n": 1}),
        json!({"model": "m", "prompt": ["a", "b"], "logprobs": null}),
        json!({"model": "m", "messages": [{"role": null, "content": 5}, {"role": "user"}], "stream": null}),
        json!({"model": "m", "extra": {"deep": [[[{"model": "not this one"}]]], "n": -1.5e-3}, "messages": null}),
        json!({"model": 3}),
        json!({"model": ""}),
        json!({"messages": [{"role": "user", "content": "no model"}]}),
    ]
}

#[test]
fn common_bodies_are_read_without_the_full_parse_and_agree_with_it() {
    for body in chat_bodies() {
        for text in [serde_json::to_string(&body).unwrap(), serde_json::to_string_pretty(&body).unwrap()] {
            assert!(agrees_at_every_cut(text.as_bytes(), CAP), "fell back on {text}");
        }
    }
}

#[test]
fn messages_render_the_same_whatever_their_key_order() {
    for body in [
        r#"{"model":"m","messages":[{"role":"system","content":"s"},{"content":"q","name":"x","role":"user"}]}"#,
        r#"{"model":"m","messages":[{"content":null,"tool_calls":[{"id":"1"}],"role":"assistant"}]}"#,
        r#"{"model":"m","messages":[{"content":[{"text":"a","type":"text"}],"role":"user"},{"content":"b"}]}"#,
        r#"{"tools":[{"type":"function"}],"messages":[{"role":"user","content":"q"}],"model":"m"}"#,
    ] {
        assert!(agrees_at_every_cut(body.as_bytes(), CAP), "fell back on {body}");
        assert!(agrees_at_every_cut(body.as_bytes(), 3), "fell back on {body}");
    }
}

#[test]
fn escapes_are_decoded_as_serde_decodes_them() {
    let body = r#"{"model":"m\u002d1","messages":[{"role":"us\u0065r","content":"\u00e9\ud83d\ude00\/\b\f\t\r"}]}"#;
    assert!(agrees_at_every_cut(body.as_bytes(), 1024));
}

#[test]
fn unusual_shapes_and_invalid_bodies_go_to_the_full_parse() {
    let bodies: [&[u8]; 15] = [
        br#"{"messages":[{"role":"user","tool_calls":[],"content":"x"}],"model":"m"}"#,
        br#"{"mod\u0065l":"m"}"#,
        br#"{"model":"a","model":"b"}"#,
        br#"{"model":"m","messages":[{"role":"user","role":"user"}]}"#,
        br#"{"model":"m","messages":[["user","hi"]]}"#,
        br#"{"model":"m","messages":[{"role":"user","content":"\ud83d"}]}"#, // lone surrogate
        br#"["m"]"#,
        br#"{"model":"m",}"#,
        br#"{"model":"m"} x"#,
        br#"{"model":"m","n":01}"#,
        br#"{"model":"m","n":1.}"#,
        b"{\"model\":\"m\",\"x\":\"\x01\"}",
        b"{\"model\":\"m\",\"x\":\"\xff\"}",
        br#"{"model":"m","stream":"yes"}"#,
        br#"{"model":"m""#,
    ];
    for body in bodies {
        assert!(!agrees_at_every_cut(body, CAP), "read {}", String::from_utf8_lossy(body));
    }
    assert!(matches!(scan(&[b""], CAP), ScanOutcome::NeedsFullParse));
}

#[test]
fn a_long_prompt_is_hashed_whole_as_it_streams() {
    let text = "the quick brown fox ".repeat(50_000);
    let body = serde_json::to_vec(&json!({"model": "m", "messages": [{"role": "user", "content": text}]})).unwrap();
    let settings = PrefixSettings::default();
    let mut scanner = RequestScanner::new(&settings);
    body.chunks(16 * 1024).for_each(|chunk| scanner.feed(chunk));
    let ScanOutcome::Read(Ok(request)) = scanner.finish() else { panic!("not read") };
    assert_eq!(request.prompt_len, "<|user|>".len() + text.len());
    assert_eq!(Ok(&request), parse_request(&body, &settings).as_ref());
    let chain = request.prompt.salted("m", None);
    assert_eq!(chain.blocks as usize, request.prompt_len / 64);
    assert_eq!(chain.ends.last(), Some(&15_616), "the last key of 15,625 blocks");
    assert_eq!(chain.keys.len(), 570);
}

#[test]
fn deep_nesting_in_an_unknown_field_costs_no_stack() {
    let depth = 200_000;
    let body = format!("{{\"model\":\"m\",\"x\":{}{}}}", "[".repeat(depth), "]".repeat(depth));
    assert!(expected(body.as_bytes(), CAP).is_ok());
    assert!(agrees_at_every_cut(body.as_bytes(), CAP));
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i32>().prop_map(serde_json::Value::from),
        (-1e6f64..1e6).prop_map(serde_json::Value::from),
        "[a-z\"\\\\\n\u{e9}\u{1F600} ]{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("role".to_string()),
                    Just("content".to_string()),
                    Just("text".to_string()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..4
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A message as clients write it, its fields in any order, sometimes with odd values;
/// and whether its tool calls come before its content (a shape left to serde).
fn message() -> impl Strategy<Value = (String, bool)> {
    let text = "[a-z\"\\\n\u{e9}\u{1F600} ]{0,80}".prop_map(serde_json::Value::from);
    let role = prop_oneof![Just(json!("user")), Just(json!("assistant")), Just(json!(null)), json_value()];
    let part = prop_oneof![
        text.clone().prop_map(|t| json!({"type": "text", "text": t})),
        json_value().prop_map(|v| json!({"type": "image_url", "image_url": v})),
    ];
    let content =
        prop_oneof![text, proptest::collection::vec(part, 0..3).prop_map(serde_json::Value::from), json_value()];
    let field = |name: &'static str, value: BoxedStrategy<serde_json::Value>| {
        proptest::option::weighted(0.8, value).prop_map(move |v| v.map(|v| format!("\"{name}\":{v}")))
    };
    (
        field("role", role.boxed()),
        field("content", content.boxed()),
        field("tool_calls", json_value().boxed()),
        field("name", json_value().boxed()),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(role, content, calls, name, order)| {
            let mut fields: Vec<String> = [role, content, calls, name].into_iter().flatten().collect();
            let turn = order.index(fields.len() + 1).min(fields.len());
            fields.rotate_left(turn);
            let at = |name: &str| fields.iter().position(|f| f.starts_with(&format!("\"{name}\"")));
            let calls_first = matches!((at("tool_calls"), at("content")), (Some(c), Some(t)) if c < t);
            (format!("{{{}}}", fields.join(",")), calls_first)
        })
}

fn cut(body: &[u8], cuts: &[prop::sample::Index]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
    points.sort_unstable();
    let mut chunks = Vec::new();
    let mut from = 0;
    for point in points {
        chunks.push(body[from..point].to_vec());
        from = point;
    }
    chunks.push(body[from..].to_vec());
    chunks
}

proptest! {
    #[test]
    fn agrees_with_the_full_parse_on_chat_requests(
        messages in proptest::collection::vec(message(), 0..4),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
        cap in 0usize..200,
    ) {
        let texts: Vec<&str> = messages.iter().map(|(text, _)| text.as_str()).collect();
        let body = format!("{{\"model\":\"m\",\"messages\":[{}]}}", texts.join(","));
        let chunks = cut(body.as_bytes(), &cuts);
        let chunks: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        match scan(&chunks, cap) {
            ScanOutcome::Read(got) => prop_assert_eq!(got, expected(body.as_bytes(), cap)),
            // Only the shapes the scanner leaves to serde may fall back.
            ScanOutcome::NeedsFullParse => prop_assert!(
                expected(body.as_bytes(), cap).is_err() || messages.iter().any(|(_, calls_first)| *calls_first),
                "fell back on {}", body
            ),
        }
    }

    #[test]
    fn agrees_with_the_full_parse_on_arbitrary_requests(
        model in prop_oneof![Just(json!("m")), json_value()],
        messages in proptest::collection::vec(json_value(), 0..4),
        extra in json_value(),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
        cap in 0usize..200,
    ) {
        let body = serde_json::to_vec(&json!({"model": model, "messages": messages, "extra": extra})).unwrap();
        let chunks = cut(&body, &cuts);
        let chunks: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        if let ScanOutcome::Read(got) = scan(&chunks, cap) {
            prop_assert_eq!(got, expected(&body, cap));
        }
    }

    /// Valid bodies with one byte replaced: most become invalid, some stay valid with
    /// another meaning; the scanner must never read one differently from serde.
    #[test]
    fn a_damaged_body_is_never_read_differently(
        body in prop::sample::select(chat_bodies()),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..3),
    ) {
        let mut body = serde_json::to_vec(&body).unwrap();
        let at = at.index(body.len());
        body[at] = byte;
        let chunks = cut(&body, &cuts);
        let chunks: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        if let ScanOutcome::Read(got) = scan(&chunks, CAP) {
            prop_assert_eq!(got, expected(&body, CAP));
        }
    }
}

#[test]
fn damaged_bodies_reach_both_outcomes() {
    // The property above is only worth something if a damaged body is sometimes read
    // and sometimes refused; count both over every position of one body.
    let body = serde_json::to_vec(&chat_bodies()[1]).unwrap();
    let (mut read, mut refused) = (0, 0);
    for at in 0..body.len() {
        for byte in [b' ', b'x', b'"', b'}', b'0', 0xff] {
            let mut damaged = body.clone();
            damaged[at] = byte;
            match scan(&[&damaged], CAP) {
                ScanOutcome::Read(got) => {
                    assert_eq!(got, expected(&damaged, CAP));
                    read += 1;
                }
                ScanOutcome::NeedsFullParse => refused += 1,
            }
        }
    }
    assert!(read > 100 && refused > 100, "read {read}, refused {refused}");
}
