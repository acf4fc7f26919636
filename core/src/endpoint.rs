//! A model-server pod address, as Envoy's `override_host` policy expects it: `ip:port`.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An `ip:port` pod address. Host names are refused: `override_host` matches hosts by
/// resolved address, so a name would never match and would silently fall back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint(SocketAddr);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid endpoint {input:?}: expected ip:port, e.g. 10.0.0.5:8000 or [fd00::5]:8000")]
pub struct EndpointParseError {
    pub input: String,
}

impl Endpoint {
    pub fn new(addr: SocketAddr) -> Self {
        Self(addr)
    }

    pub fn socket_addr(&self) -> SocketAddr {
        self.0
    }

    pub fn port(&self) -> u16 {
        self.0.port()
    }
}

impl FromStr for Endpoint {
    type Err = EndpointParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SocketAddr::from_str(s.trim()).map(Endpoint).map_err(|_| EndpointParseError { input: s.to_string() })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for Endpoint {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Endpoint {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Endpoint::from_str(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for Endpoint {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Endpoint".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A pod address, ip:port, e.g. 10.0.0.5:8000 or [fd00::5]:8000",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ipv4_and_ipv6() {
        assert_eq!("10.0.0.5:8000".parse::<Endpoint>().unwrap().to_string(), "10.0.0.5:8000");
        assert_eq!("[fd00::5]:80".parse::<Endpoint>().unwrap().to_string(), "[fd00::5]:80");
    }

    #[test]
    fn refuses_host_names_and_missing_ports() {
        for bad in ["pod-a:8000", "10.0.0.5", "", "10.0.0.5:99999"] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad} should be refused");
        }
    }
}
