//! The scanner's early answer (routing before the body ends) and its check of the
//! rest of a body that was routed early.

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::request::parse_request;

const CAP: usize = 64;

/// Hashing in 4-byte blocks, of the prompt's first `cap` bytes.
fn prefix(cap: usize) -> PrefixSettings {
    PrefixSettings { block_chars: 4, max_blocks: (cap / 4) as u32, ..PrefixSettings::default() }
}

/// The keys of a request's prompt.
fn keys(request: &InferenceRequest) -> Vec<u64> {
    request.prompt.salted(&request.model, None).keys
}

/// Feeds `body` in `chunk`-byte pieces; returns the request as first offered before
/// the body ended, the bytes fed by then, and the verdict on the whole body.
fn route_early(body: &[u8], chunk: usize, cap: usize) -> (Option<Result<InferenceRequest, ApiError>>, usize, Checked) {
    let mut scanner = RequestScanner::new(&prefix(cap));
    let mut offered = None;
    for piece in body.chunks(chunk.max(1)) {
        scanner.feed(piece);
        if offered.is_none() && scanner.fed() < body.len() {
            offered = scanner.early_request(body.len()).map(|r| (r, scanner.fed()));
        }
    }
    let model = offered.as_ref().and_then(|(r, _)| r.as_ref().ok()).map(|r| r.model.clone()).unwrap_or_default();
    let at = offered.as_ref().map_or(0, |(_, at)| *at);
    (offered.map(|(r, _)| r), at, scanner.finish_routed(&model))
}

/// A chat body with `model` first (as curl and most HTTP clients write it) or after the
/// messages (as the OpenAI Python SDK writes it).
fn long_chat(model_first: bool) -> Vec<u8> {
    let text = "the quick brown fox ".repeat(40);
    let messages = format!(r#"[{{"role":"system","content":"be brief"}},{{"role":"user","content":"{text}"}}]"#);
    let body = if model_first {
        format!(r#"{{"model":"m","max_tokens":5,"messages":{messages}}}"#)
    } else {
        format!(r#"{{"messages":{messages},"model":"m","max_tokens":5}}"#)
    };
    body.into_bytes()
}

#[test]
fn routes_once_the_model_and_the_hashed_prompt_are_in() {
    let body = long_chat(true);
    let whole = parse_request(&body, &prefix(CAP)).unwrap();
    let (offered, at, checked) = route_early(&body, 1, CAP);
    let request = offered.expect("offered before the end").unwrap();
    assert_eq!(request.model, "m");
    assert_eq!(request.max_tokens, Some(5));
    assert_eq!(keys(&request), keys(&whole));
    assert_eq!(keys(&request).len(), CAP / 4);
    // The declared length stands in for the prompt's; it is never shorter than it.
    assert_eq!(request.prompt_len, body.len());
    assert!(request.prompt_len >= whole.prompt_len);
    // As soon as the prompt's first 64 bytes were in (fed a byte at a time, so the
    // first offer is the earliest), long before the end.
    let user_text = body.windows(9).position(|w| w == b"the quick").unwrap();
    assert!(at > user_text && at < user_text + CAP, "decided at {at}");
    assert!(matches!(checked, Checked::Valid), "{checked:?}");
}

#[test]
fn a_model_after_the_messages_waits_for_the_model() {
    let body = long_chat(false);
    let (offered, at, checked) = route_early(&body, 16, CAP);
    assert!(offered.is_some());
    let model_at = body.windows(9).position(|w| w == b"\"model\":\"").unwrap();
    assert!(at > model_at + 11, "decided at {at}, model at {model_at}");
    assert!(matches!(checked, Checked::Valid));
}

#[test]
fn a_short_prompt_is_never_routed_early() {
    let body = serde_json::to_vec(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})).unwrap();
    assert!(route_early(&body, 1, CAP).0.is_none());
}

#[test]
fn an_invalid_model_is_refused_before_the_end() {
    let mut body = br#"{"model":"","messages":[{"role":"user","content":""#.to_vec();
    body.extend(std::iter::repeat_n(b'x', 500));
    body.extend_from_slice(br#""}]}"#);
    let (offered, ..) = route_early(&body, 8, CAP);
    assert_eq!(offered.unwrap().unwrap_err().code, "invalid_model");
}

/// A body routed early whose rest is bad: each is refused as the whole-body read
/// refuses it, or, for a shape the scanner does not follow, left to the engine.
#[test]
fn the_rest_of_a_routed_body_is_still_checked() {
    let text = "x".repeat(200);
    let cases: [(String, &str); 8] = [
        (format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{text}"}}],"model":"other"}}"#), "model"),
        (format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{text}"}}],"mod\u0065l":"other"}}"#), "model"),
        (format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{text}"}}],}}"#), "json"),
        (format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{text}"}}]"#), "ended"),
        (format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{text}~"}}]}}"#), "utf8"),
        (format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{text}"}}],"stream":"yes"}}"#), "serde"),
        (format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{text}"}}],"max_tokens":-1}}"#), "serde"),
        (format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{text}"}},["odd"]]}}"#), "engine"),
    ];
    for (body, kind) in cases {
        let mut body = body.into_bytes();
        if kind == "utf8" {
            let at = body.iter().position(|&b| b == b'~').unwrap();
            body[at] = 0xff;
        }
        let body = &body[..];
        let (offered, _, checked) = route_early(body, 7, CAP);
        assert_eq!(offered.unwrap().unwrap().model, "m");
        let whole = parse_request(body, &prefix(CAP));
        match (kind, checked) {
            ("engine", Checked::Unverified) => {}
            (_, Checked::Refused(error)) => {
                assert_eq!(error.status, 400);
                assert!(whole.is_err(), "refused what the whole-body read accepts: {kind}");
                let message = error.message.clone();
                match kind {
                    "model" => assert!(message.contains("has the key 'model' twice"), "{message}"),
                    "json" => assert!(message.contains("not valid JSON: the error is within bytes"), "{message}"),
                    "ended" => assert!(message.contains("before its JSON did"), "{message}"),
                    "utf8" => assert!(message.contains("not valid UTF-8"), "{message}"),
                    _ => {
                        let whole = whole.unwrap_err();
                        assert_eq!((error.code, error.param), (whole.code, whole.param));
                        assert_eq!(message, whole.message);
                    }
                }
            }
            (_, checked) => panic!("{kind}: {checked:?}"),
        }
    }
}

fn chat_body() -> impl Strategy<Value = Vec<u8>> {
    let text = "[a-z\"\\\n\u{e9}\u{1F600} ]{0,120}";
    let message = (prop_oneof![Just("user"), Just("system"), Just("assistant")], text)
        .prop_map(|(role, content)| format!(r#"{{"role":"{role}","content":{}}}"#, json!(content)));
    (proptest::collection::vec(message, 1..4), any::<bool>(), proptest::option::of(1u32..100)).prop_map(
        |(messages, model_first, max_tokens)| {
            let messages = format!(r#""messages":[{}]"#, messages.join(","));
            let limit = max_tokens.map(|n| format!(r#","max_tokens":{n}"#)).unwrap_or_default();
            let body = if model_first {
                format!(r#"{{"model":"m",{messages}{limit}}}"#)
            } else {
                format!(r#"{{{messages}{limit},"model":"m"}}"#)
            };
            body.into_bytes()
        },
    )
}

proptest! {
    /// Whatever the cut, an early answer has the whole-body read's model and prompt
    /// start, and a valid body is never refused afterwards.
    #[test]
    fn an_early_answer_agrees_with_the_whole_body(body in chat_body(), chunk in 1usize..64, cap in 0usize..100) {
        let whole = parse_request(&body, &prefix(cap)).unwrap();
        let (offered, _, checked) = route_early(&body, chunk, cap);
        if let Some(offered) = offered {
            let offered = offered.unwrap();
            prop_assert_eq!(&offered.model, &whole.model);
            prop_assert_eq!(keys(&offered), keys(&whole));
            prop_assert!(offered.prompt_len >= whole.prompt_len);
            prop_assert!(matches!(checked, Checked::Valid), "{:?}", checked);
        }
    }

    /// One byte of a long body replaced after the decision: never read as valid when
    /// the whole-body read refuses it, never refused when it accepts it.
    #[test]
    fn a_damaged_routed_body_is_judged_as_the_whole_body_read_judges_it(
        at in 120usize..400,
        byte in any::<u8>(),
        chunk in 1usize..64,
    ) {
        let mut body = long_chat(true);
        let at = at.min(body.len() - 1);
        body[at] = byte;
        let whole = parse_request(&body, &prefix(CAP));
        let (offered, _, checked) = route_early(&body, chunk, CAP);
        prop_assume!(offered.is_some_and(|r| r.is_ok()));
        match checked {
            Checked::Valid => prop_assert!(whole.is_ok_and(|r| r.model == "m")),
            Checked::Refused(_) => prop_assert!(whole.is_err()),
            Checked::Unverified => prop_assert!(serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_ok()),
        }
    }
}
