//! This worker's own view of load: requests it sent and that have not finished, and
//! requests it sent since the pod's last scrape (which the scrape cannot show yet).

use std::collections::HashMap;

use crate::endpoint::Endpoint;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct PodCounts {
    in_flight: u32,
    sent_since_snapshot: u32,
}

#[derive(Debug, Default)]
pub struct InflightCounts {
    pods: HashMap<Endpoint, PodCounts>,
}

impl InflightCounts {
    pub fn dispatched(&mut self, endpoint: Endpoint) {
        let counts = self.pods.entry(endpoint).or_default();
        counts.in_flight = counts.in_flight.saturating_add(1);
        counts.sent_since_snapshot = counts.sent_since_snapshot.saturating_add(1);
    }

    pub fn finished(&mut self, endpoint: Endpoint) {
        if let Some(counts) = self.pods.get_mut(&endpoint) {
            counts.in_flight = counts.in_flight.saturating_sub(1);
        }
    }

    pub fn reset_sent_since_snapshot(&mut self) {
        for counts in self.pods.values_mut() {
            counts.sent_since_snapshot = 0;
        }
        self.pods.retain(|_, c| c.in_flight > 0);
    }

    pub fn in_flight(&self, endpoint: Endpoint) -> u32 {
        self.pods.get(&endpoint).map_or(0, |c| c.in_flight)
    }

    pub fn sent_since_snapshot(&self, endpoint: Endpoint) -> u32 {
        self.pods
            .get(&endpoint)
            .map_or(0, |c| c.sent_since_snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_rise_and_fall() {
        let e: Endpoint = "10.0.0.1:1".parse().unwrap();
        let mut counts = InflightCounts::default();
        counts.dispatched(e);
        counts.dispatched(e);
        counts.finished(e);
        assert_eq!((counts.in_flight(e), counts.sent_since_snapshot(e)), (1, 2));
        counts.reset_sent_since_snapshot();
        assert_eq!((counts.in_flight(e), counts.sent_since_snapshot(e)), (1, 0));
        counts.finished(e);
        counts.finished(e);
        assert_eq!(counts.in_flight(e), 0, "never below zero");
    }
}
