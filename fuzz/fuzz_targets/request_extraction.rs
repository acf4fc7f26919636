//! A request body, as a client sends it: never a panic; a model name that is accepted
//! is always safe to copy into a header; a refusal is an OpenAI-shaped JSON error; and
//! the streaming scanner, fed the body cut anywhere, answers what the whole-body parse
//! answers whenever it answers at all.
#![no_main]

use infergate_core::config::{PrefixSettings, check_model_name};
use infergate_core::request::{RequestScanner, ScanOutcome, parse_request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    // Where to cut the body and how much prompt to keep follow from its length, so the
    // seeds stay plain request bodies.
    let (cut, cap) = (body.len() % 97 + 1, body.len().wrapping_mul(7) % 300);
    let prefix = PrefixSettings { block_chars: 4, max_blocks: (cap / 4) as u32, ..PrefixSettings::default() };
    let whole = parse_request(body, &prefix);
    match &whole {
        Ok(request) => {
            assert!(check_model_name(&request.model).is_ok(), "accepted an unsafe model name {:?}", request.model);
            assert!(request.prompt_tokens() >= 1);
        }
        Err(error) => {
            assert!((400..600).contains(&error.status));
            let reply: serde_json::Value = serde_json::from_slice(&error.body()).expect("the error body is JSON");
            assert!(reply["error"]["message"].is_string(), "{reply}");
        }
    }
    let mut scanner = RequestScanner::new(&prefix);
    body.chunks(cut).for_each(|chunk| scanner.feed(chunk));
    if let ScanOutcome::Read(scanned) = scanner.finish() {
        assert_eq!(scanned, whole, "the scanner disagrees with the whole-body parse");
    }
});
