//! A prefill pod's prompts waiting for their decode pod: each prefill leg leaves its
//! prompt's KV here under the request id its answer names, until a decode pod claims
//! it (once) or its lease runs out, as vLLM's prefill side holds the blocks of a
//! finished prefill for `VLLM_NIXL_ABORT_REQUEST_TIMEOUT` seconds.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug)]
struct Held {
    prompt_tokens: u32,
    expires: Instant,
}

#[derive(Debug, Default)]
struct Entries {
    held: HashMap<String, Held>,
    expired_total: u64,
}

/// The clock is passed in, so that leases are tested without waiting.
#[derive(Debug)]
pub struct KvRegistry {
    lease: Duration,
    entries: Mutex<Entries>,
}

impl KvRegistry {
    pub fn new(lease: Duration) -> Self {
        Self { lease, entries: Mutex::new(Entries::default()) }
    }

    /// Holds a prefilled prompt's KV for a decode pod until `now` + the lease.
    pub fn hold(&self, request_id: String, prompt_tokens: u32, now: Instant) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.expire(now);
            entries.held.insert(request_id, Held { prompt_tokens, expires: now + self.lease });
        }
    }

    /// Hands over a held prompt's KV: its token count, once. `None` when the id is
    /// unknown, already claimed or expired.
    pub fn claim(&self, request_id: &str, now: Instant) -> Option<u32> {
        let mut entries = self.entries.lock().ok()?;
        entries.expire(now);
        entries.held.remove(request_id).map(|held| held.prompt_tokens)
    }

    /// Leases that ran out unclaimed, since the start (vLLM's
    /// `nixl_num_kv_expired_reqs`).
    pub fn expired_total(&self, now: Instant) -> u64 {
        self.entries.lock().map_or(0, |mut entries| {
            entries.expire(now);
            entries.expired_total
        })
    }

    pub fn held(&self) -> usize {
        self.entries.lock().map_or(0, |entries| entries.held.len())
    }
}

impl Entries {
    fn expire(&mut self, now: Instant) {
        let before = self.held.len();
        self.held.retain(|_, held| held.expires > now);
        self.expired_total += (before - self.held.len()) as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_prompt_is_claimed_once() {
        let registry = KvRegistry::new(Duration::from_secs(480));
        let now = Instant::now();
        registry.hold("cmpl-1".into(), 600, now);
        assert_eq!(registry.claim("cmpl-2", now), None, "unknown");
        assert_eq!(registry.claim("cmpl-1", now + Duration::from_secs(1)), Some(600));
        assert_eq!(registry.claim("cmpl-1", now + Duration::from_secs(2)), None, "already handed over");
        assert_eq!(registry.expired_total(now), 0);
    }

    #[test]
    fn an_unclaimed_prompt_expires_with_its_lease() {
        let registry = KvRegistry::new(Duration::from_secs(480));
        let now = Instant::now();
        registry.hold("a".into(), 10, now);
        registry.hold("b".into(), 20, now + Duration::from_secs(100));
        let later = now + Duration::from_secs(480);
        assert_eq!(registry.claim("a", later), None, "its lease ended");
        assert_eq!(registry.expired_total(later), 1);
        assert_eq!(registry.held(), 1);
        assert_eq!(registry.claim("b", later), Some(20));
    }
}
