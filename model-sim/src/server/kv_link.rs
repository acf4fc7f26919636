//! A decode pod's inbound KV link: transfers run one after another, each for its
//! bytes over the link's bandwidth, so that two decode legs arriving together wait
//! for each other as they would on one NIC.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug)]
pub struct KvLink {
    free_at: Mutex<Option<Instant>>,
}

impl Default for KvLink {
    fn default() -> Self {
        Self::new()
    }
}

impl KvLink {
    pub fn new() -> Self {
        Self { free_at: Mutex::new(None) }
    }

    /// Books a transfer of `duration` behind those already booked; returns when it
    /// ends. The clock is passed in, so that the queueing is tested without waiting.
    pub fn book(&self, duration: Duration, now: Instant) -> Instant {
        let Ok(mut free_at) = self.free_at.lock() else {
            return now + duration;
        };
        let start = free_at.map_or(now, |t| t.max(now));
        let end = start + duration;
        *free_at = Some(end);
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_queue_behind_each_other_and_an_idle_link_starts_at_once() {
        let link = KvLink::new();
        let now = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(link.book(ms(50), now), now + ms(50));
        assert_eq!(link.book(ms(30), now + ms(10)), now + ms(80), "waits for the first");
        assert_eq!(link.book(ms(5), now + ms(200)), now + ms(205), "the link was idle again");
    }
}
