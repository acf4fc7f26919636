//! A pod's engine: admission into a batch of at most `max_num_seqs` requests, prefill
//! time proportional to the prompt, and a decode step that slows as the batch grows.
//! Time is real, scaled by `time_scale`, and spent waiting on timers, not the CPU.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

/// Tokens are approximated as 4 characters, as the routing side does.
pub const CHARS_PER_TOKEN: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineProfile {
    pub max_num_seqs: u32,
    pub prefill_tokens_per_s: f64,
    /// Decode step time with an empty batch.
    pub itl_base_ms: f64,
    /// Added step time per running sequence.
    pub itl_per_seq_ms: f64,
    pub kv_capacity_tokens: u64,
    pub block_size: u32,
    /// 1.0 is real time; 0.1 runs ten times faster.
    pub time_scale: f64,
}

impl Default for EngineProfile {
    fn default() -> Self {
        Self {
            max_num_seqs: 16,
            prefill_tokens_per_s: 8_000.0,
            itl_base_ms: 20.0,
            itl_per_seq_ms: 1.0,
            kv_capacity_tokens: 16 * 5_000,
            block_size: 16,
            time_scale: 1.0,
        }
    }
}

pub struct Engine {
    profile: EngineProfile,
    slots: Semaphore,
    waiting: AtomicU64,
    running: AtomicU64,
    kv_tokens: AtomicU64,
    prompt_tokens_total: AtomicU64,
    generation_tokens_total: AtomicU64,
}

/// A request holding a batch slot; dropping it frees the slot and its KV tokens.
pub struct Admitted<'a> {
    engine: &'a Engine,
    /// `None` only if the semaphore were closed, which this type never does.
    _permit: Option<SemaphorePermit<'a>>,
    kv_tokens: u64,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.engine.running.fetch_sub(1, Ordering::Relaxed);
        self.engine
            .kv_tokens
            .fetch_sub(self.kv_tokens, Ordering::Relaxed);
    }
}

/// What `/metrics` reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineStats {
    pub waiting: u64,
    pub running: u64,
    pub kv_cache_usage: f64,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
}

impl Engine {
    pub fn new(profile: EngineProfile) -> Self {
        Self {
            slots: Semaphore::new(profile.max_num_seqs as usize),
            profile,
            waiting: AtomicU64::new(0),
            running: AtomicU64::new(0),
            kv_tokens: AtomicU64::new(0),
            prompt_tokens_total: AtomicU64::new(0),
            generation_tokens_total: AtomicU64::new(0),
        }
    }

    pub fn profile(&self) -> &EngineProfile {
        &self.profile
    }

    /// Waits FCFS for a batch slot.
    pub async fn admit(&self, prompt_tokens: u64, max_tokens: u64) -> Admitted<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let permit = self.slots.acquire().await.ok();
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        self.running.fetch_add(1, Ordering::Relaxed);
        let kv_tokens = prompt_tokens + max_tokens;
        self.kv_tokens.fetch_add(kv_tokens, Ordering::Relaxed);
        self.prompt_tokens_total
            .fetch_add(prompt_tokens, Ordering::Relaxed);
        Admitted {
            engine: self,
            _permit: permit,
            kv_tokens,
        }
    }

    pub fn prefill_time(&self, prompt_tokens: u64) -> Duration {
        self.scaled_ms(prompt_tokens as f64 / self.profile.prefill_tokens_per_s * 1000.0)
    }

    pub fn decode_step_time(&self) -> Duration {
        let batch = self.running.load(Ordering::Relaxed) as f64;
        self.scaled_ms(self.profile.itl_base_ms + self.profile.itl_per_seq_ms * batch)
    }

    pub fn generated(&self, tokens: u64) {
        self.generation_tokens_total
            .fetch_add(tokens, Ordering::Relaxed);
    }

    fn scaled_ms(&self, ms: f64) -> Duration {
        Duration::from_secs_f64((ms * self.profile.time_scale).max(0.0) / 1000.0)
    }

    pub fn stats(&self) -> EngineStats {
        EngineStats {
            waiting: self.waiting.load(Ordering::Relaxed),
            running: self.running.load(Ordering::Relaxed),
            kv_cache_usage: (self.kv_tokens.load(Ordering::Relaxed) as f64
                / self.profile.kv_capacity_tokens as f64)
                .min(1.0),
            prompt_tokens_total: self.prompt_tokens_total.load(Ordering::Relaxed),
            generation_tokens_total: self.generation_tokens_total.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_batch_makes_requests_wait() {
        let engine = Engine::new(EngineProfile {
            max_num_seqs: 2,
            ..Default::default()
        });
        let a = engine.admit(10, 10).await;
        let _b = engine.admit(10, 10).await;
        assert_eq!(engine.stats().running, 2);
        let third = engine.admit(10, 10);
        tokio::pin!(third);
        assert!(futures::poll!(third.as_mut()).is_pending());
        assert_eq!(engine.stats().waiting, 1);
        drop(a);
        let _c = third.await;
        assert_eq!((engine.stats().waiting, engine.stats().running), (0, 2));
    }

    #[test]
    fn decode_slows_with_batch_size() {
        let engine = Engine::new(EngineProfile::default());
        let empty = engine.decode_step_time();
        engine.running.store(10, Ordering::Relaxed);
        assert!(engine.decode_step_time() > empty);
    }
}
