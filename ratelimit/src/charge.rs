//! What one descriptor from Envoy asks to count. The global router's route sends two
//! per request, each with `limit`, `tenant` and `model` entries: `limit=requests`
//! counts the request, `limit=tokens` counts the `tokens` entry (the prompt tokens the
//! filter estimated).

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Requests,
    Tokens,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Requests => "requests",
            Kind::Tokens => "tokens",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub kind: Kind,
    pub tenant: String,
    pub model: String,
    pub hits: u64,
}

impl Charge {
    /// `None` for a descriptor that is not ours: it is answered OK, never counted.
    pub fn from_descriptor(descriptor: &RateLimitDescriptor, request_hits: u32) -> Option<Self> {
        let entry = |key: &str| descriptor.entries.iter().find(|e| e.key == key).map(|e| e.value.as_str());
        let kind = match entry("limit")? {
            "requests" => Kind::Requests,
            "tokens" => Kind::Tokens,
            _ => return None,
        };
        let hits = match kind {
            Kind::Requests => descriptor.hits_addend.map_or(u64::from(request_hits.max(1)), |v| v.value),
            Kind::Tokens => entry("tokens")?.parse().ok()?,
        };
        Some(Self { kind, tenant: entry("tenant")?.to_string(), model: entry("model")?.to_string(), hits })
    }

    /// The Redis key of this charge's counter in the minute `window`.
    pub fn key(&self, window: u64) -> String {
        counter_key(self.kind, &self.tenant, &self.model, window)
    }
}

/// Tenants and models are free text from headers: keep them from splitting the key.
pub fn counter_key(kind: Kind, tenant: &str, model: &str, window: u64) -> String {
    let clean = |s: &str| s.replace(':', "%3A");
    format!("infergate:rl:{}:{}:{}:{window}", kind.as_str(), clean(tenant), clean(model))
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

    use super::*;

    fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: entries.iter().map(|(k, v)| Entry { key: (*k).into(), value: (*v).into() }).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn requests_count_one_and_tokens_count_their_entry() {
        let requests = descriptor(&[("limit", "requests"), ("tenant", "t1"), ("model", "m")]);
        let charge = Charge::from_descriptor(&requests, 0).unwrap();
        assert_eq!((charge.kind, charge.hits), (Kind::Requests, 1));
        let tokens = descriptor(&[("limit", "tokens"), ("tenant", "t1"), ("model", "m"), ("tokens", "812")]);
        let charge = Charge::from_descriptor(&tokens, 1).unwrap();
        assert_eq!((charge.kind, charge.hits), (Kind::Tokens, 812));
        assert_eq!(charge.key(7), "infergate:rl:tokens:t1:m:7");
    }

    #[test]
    fn foreign_or_incomplete_descriptors_are_not_counted() {
        assert!(Charge::from_descriptor(&descriptor(&[("remote_address", "10.0.0.1")]), 1).is_none());
        assert!(
            Charge::from_descriptor(&descriptor(&[("limit", "tokens"), ("tenant", "t"), ("model", "m")]), 1).is_none()
        );
        assert!(
            Charge::from_descriptor(
                &descriptor(&[("limit", "tokens"), ("tenant", "t"), ("model", "m"), ("tokens", "x")]),
                1
            )
            .is_none()
        );
    }

    #[test]
    fn a_colon_in_a_model_name_cannot_forge_another_key() {
        assert_eq!(counter_key(Kind::Requests, "a", "org:model", 1), "infergate:rl:requests:a:org%3Amodel:1");
    }
}
