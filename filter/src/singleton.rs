//! The bootstrap singleton: the only VM that registers the snapshot queue, so the only
//! one woken by pushes. It keeps the newest snapshot, writes it to shared data, then
//! bumps the generation that every worker polls.

use infergate_core::filter_config::{GENERATION_KEY, SNAPSHOT_KEY, SNAPSHOT_QUEUE};

use crate::host;

pub struct Singleton {
    generation: u64,
}

impl Singleton {
    pub fn start() -> Result<Self, String> {
        host::register_queue(SNAPSHOT_QUEUE).map_err(|s| format!("cannot register queue {SNAPSHOT_QUEUE}: {s:?}"))?;
        // Continue any generation already published in this process, so that workers
        // never see the counter go back.
        let generation = host::shared_data(GENERATION_KEY).map_or(0, |bytes| decode_generation(&bytes));
        log::info!("infergate singleton: ready, generation {generation}");
        Ok(Self { generation })
    }

    /// Drains the queue and publishes only the newest snapshot: older ones are stale.
    pub fn publish_newest(&mut self, queue_id: u32) {
        let mut newest = None;
        let mut drained = 0u32;
        while let Some(bytes) = host::dequeue(queue_id) {
            newest = Some(bytes);
            drained += 1;
        }
        let Some(bytes) = newest else { return };
        if let Err(status) = host::set_shared_data(SNAPSHOT_KEY, &bytes) {
            log::error!("infergate singleton: cannot store snapshot: {status:?}");
            return;
        }
        self.generation += 1;
        if let Err(status) = host::set_shared_data(GENERATION_KEY, &self.generation.to_le_bytes()) {
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

/// Reads the 8-byte little-endian generation; anything else reads as 0.
pub fn decode_generation(bytes: &[u8]) -> u64 {
    <[u8; 8]>::try_from(bytes).map_or(0, u64::from_le_bytes)
}
