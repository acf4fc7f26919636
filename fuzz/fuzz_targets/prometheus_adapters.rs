//! A pod's `/metrics` text through the Prometheus parser and every engine's adapter:
//! signals or an error, never a panic, and never a signal the snapshot would refuse.
#![no_main]

use infergate_core::config::Engine;
use infergate_signals::{engines, exposition};
use libfuzzer_sys::fuzz_target;

const ENGINES: [Engine; 6] =
    [Engine::Vllm, Engine::Sglang, Engine::Trtllm, Engine::Triton, Engine::LlamaCpp, Engine::Auto];

fuzz_target!(|bytes: &[u8]| {
    let Ok(text) = std::str::from_utf8(bytes) else { return };
    let _ = exposition::parse(text);
    for engine in ENGINES {
        if let Ok(scraped) = engines::scrape(engine, text) {
            let s = &scraped.signals;
            for value in [s.waiting, s.running, s.kv_cache_usage].into_iter().flatten() {
                assert!(value.is_finite() && value >= 0.0, "{engine:?} gave {value} from {text:?}");
            }
        }
    }
});
