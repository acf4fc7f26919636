//! `infergate.yaml`: loaded and validated or refused with a message, never a panic;
//! what is accepted gives a routing config that validates too.
#![no_main]

use infergate_core::config::InfergateConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(text) = std::str::from_utf8(bytes) else { return };
    match InfergateConfig::from_yaml_str(text, "fuzz.yaml") {
        Ok(config) => assert!(config.routing_config().validate().is_ok()),
        Err(error) => assert!(!error.to_string().is_empty()),
    }
});
