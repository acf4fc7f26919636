//! The bootstrap singleton: the only VM that registers the snapshot queue, so the only
//! one woken by pushes. It keeps the newest snapshot, writes it to shared data, then
//! bumps the generation that every worker polls.

use std::rc::Rc;

use infergate_core::wire::queue::SNAPSHOTS;
use infergate_core::wire::shared_data::{GENERATION, SNAPSHOT};

use crate::host::Host;
use crate::host::events::{PassThrough, RootEvents, StreamEvents};
use crate::shared::generation;

pub struct Singleton {
    host: Rc<dyn Host>,
    generation: u64,
}

impl Singleton {
    pub fn start(host: Rc<dyn Host>) -> Result<Self, String> {
        host.register_queue(SNAPSHOTS).map_err(|s| format!("cannot register queue {SNAPSHOTS}: {s:?}"))?;
        // Continue any generation already published in this process, so that workers
        // never see the counter go back.
        let generation = generation::read(&*host, GENERATION);
        log::info!("infergate singleton: ready, generation {generation}");
        Ok(Self { host, generation })
    }

    /// Drains the queue and publishes only the newest snapshot: older ones are stale.
    fn publish_newest(&mut self, queue_id: u32) {
        let mut newest = None;
        let mut drained = 0u32;
        while let Some(bytes) = self.host.dequeue(queue_id) {
            newest = Some(bytes);
            drained += 1;
        }
        let Some(bytes) = newest else { return };
        if let Err(status) = self.host.set_shared_data(SNAPSHOT, &bytes, None) {
            log::error!("infergate singleton: cannot store snapshot: {status:?}");
            return;
        }
        self.generation += 1;
        if let Err(status) = self.host.set_shared_data(GENERATION, &self.generation.to_le_bytes(), None) {
            log::error!("infergate singleton: cannot bump generation: {status:?}");
            return;
        }
        log::debug!(
            "infergate singleton: published generation {} ({} bytes, {} queued)",
            self.generation,
            bytes.len(),
            drained
        );
    }
}

impl RootEvents for Singleton {
    fn on_queue_ready(&mut self, queue: u32) {
        self.publish_newest(queue);
    }

    fn new_stream(&self, _context_id: u32) -> Box<dyn StreamEvents> {
        Box::new(PassThrough)
    }
}

#[cfg(test)]
#[path = "singleton_tests.rs"]
mod tests;
