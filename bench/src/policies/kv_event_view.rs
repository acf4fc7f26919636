//! What an exact-cache router knows of each pod's prefix cache: an index of the blocks
//! the pod's KV events said it stored and has not removed, each event applied
//! [`KV_EVENT_LAG_S`] after the end of the engine step that published it.
//!
//! The lag: vLLM (0.11.1 and later) publishes a step's events once that step's output
//! is processed, then a ZeroMQ publisher thread sends them; the router's subscriber
//! decodes and indexes them. That is under a millisecond of transport on one host and
//! a few milliseconds of indexing under load; 5 ms is taken for both llm-d's indexer and
//! Dynamo's (which carries them over NATS). Neither router publishes a measured figure.
//! The engine model registers a block in its cache when it is allocated, before it is
//! computed; the events, and so this view, see it only once computed.

use std::collections::HashSet;

use infergate_model_sim::engine::{Engine, KvEventKind};

/// Seconds from the end of the step that computes (or evicts) a block to the router's
/// index knowing it.
pub const KV_EVENT_LAG_S: f64 = 0.005;

#[derive(Debug, Default)]
pub struct KvEventView {
    /// Per pod: the events applied so far, and the blocks held.
    pods: Vec<(usize, HashSet<u64>)>,
}

impl KvEventView {
    /// Applies every event of every pod that the router has received by `now`.
    pub fn catch_up(&mut self, engines: &[Engine], now: f64) {
        if self.pods.len() < engines.len() {
            self.pods.resize_with(engines.len(), Default::default);
        }
        for (engine, (applied, held)) in engines.iter().zip(&mut self.pods) {
            let events = engine.kv_events();
            while let Some(event) = events.get(*applied) {
                if event.at + KV_EVENT_LAG_S > now {
                    break;
                }
                match event.kind {
                    KvEventKind::Stored => held.extend(&event.hashes),
                    KvEventKind::Removed => {
                        for hash in &event.hashes {
                            held.remove(hash);
                        }
                    }
                }
                *applied += 1;
            }
        }
    }

    /// How many leading blocks of `hashes` the router believes `pod` holds.
    pub fn cached_prefix_blocks(&self, pod: usize, hashes: &[u64]) -> usize {
        self.pods.get(pod).map_or(0, |(_, held)| hashes.iter().take_while(|h| held.contains(h)).count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infergate_model_sim::engine::{EngineProfile, SimRequest};

    #[test]
    fn a_prompt_is_seen_block_by_block_as_its_chunks_are_computed_and_after_the_lag() {
        // 2,048-token chunks of a 6,000-token prompt: three steps to prefill it.
        let profile = EngineProfile { max_num_batched_tokens: 2048, ..EngineProfile::TINY };
        let mut engine = Engine::new(profile).recording_kv_events();
        let prompt = vec![b'a'; 6000 * 4];
        let request = SimRequest::from_text(0, 0.0, &prompt, 4, None, profile.block_size);
        let hashes = request.block_hashes.clone();
        engine.submit(request);
        let mut view = KvEventView::default();
        let mut now = 0.0;
        let mut seen = Vec::new();
        for step_index in 0..3 {
            let step = engine.step(now).expect("a step");
            if step_index == 0 {
                assert_eq!(engine.cached_prefix_blocks(&hashes), hashes.len(), "the engine holds all at admission");
            }
            let end = now + step.duration;
            view.catch_up(std::slice::from_ref(&engine), end);
            let at_end = view.cached_prefix_blocks(0, &hashes);
            view.catch_up(std::slice::from_ref(&engine), end + KV_EVENT_LAG_S);
            seen.push((at_end, view.cached_prefix_blocks(0, &hashes)));
            now = end;
        }
        let per_chunk = 2048 / profile.block_size as usize;
        assert_eq!(seen[0], (0, per_chunk), "nothing before the lag, the first chunk after it");
        assert_eq!(seen[1].1, 2 * per_chunk);
        assert_eq!(seen[2].1, hashes.len(), "the whole prompt once its prefill is done");
    }
}
