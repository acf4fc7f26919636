//! A request body, as a client sends it: never a panic; a model name that is accepted
//! is always safe to copy into a header; a refusal is an OpenAI-shaped JSON error.
#![no_main]

use infergate_core::config::check_model_name;
use infergate_core::request::parse_request;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    match parse_request(body) {
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
});
