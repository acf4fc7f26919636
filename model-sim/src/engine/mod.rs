//! The engine model of one pod, in virtual time: a continuous-batching loop as vLLM runs
//! it. Each step admits waiting requests first-come first-served while batch slots, KV
//! blocks and LoRA slots allow, then spends a token budget on one decode token per
//! running request and on chunks of pending prefills. Its duration is the decode cost of
//! the batch plus the prefill time of the chunks. Nothing here reads a clock or a random
//! source, so a given request sequence always gives the same timings.

mod histogram;
mod kv_cache;
mod kv_events;
mod lora;
mod profile;
mod request;

use std::collections::VecDeque;

pub use histogram::{Histogram, ITL_BUCKETS, TTFT_BUCKETS};
pub use kv_cache::{Allocation, KvCache};
pub use kv_events::{KvEvent, KvEventKind, KvEventLog};
pub use lora::{LoraSlots, Residency};
pub use profile::{EngineProfile, NamedProfile};
pub use request::{CHARS_PER_TOKEN, SimRequest, block_hashes};

/// Something that happened to a request at the end of a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EngineEvent {
    /// The prefill finished and produced the first output token; `cached_tokens` of the
    /// prompt came from the prefix cache (vLLM's `usage.prompt_tokens_details`).
    FirstToken { id: u64, at: f64, cached_tokens: u32 },
    /// One more output token.
    Token { id: u64, at: f64 },
    /// The last token was produced; the request's blocks are released.
    Finished { id: u64, at: f64 },
}

/// One engine step: how long it took and what it produced at its end.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub duration: f64,
    pub events: Vec<EngineEvent>,
}

#[derive(Debug, Clone)]
struct Running {
    request: SimRequest,
    allocation: Allocation,
    prefill_left: u32,
    /// Prompt tokens found in the prefix cache at admission.
    cached: u32,
    generated: u32,
    last_token_at: f64,
    admitted_at: f64,
}

/// Counters and gauges, as the engine's `/metrics` reports them.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineStats {
    pub waiting: usize,
    pub running: usize,
    pub kv_cache_usage: f64,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    pub prefix_cache_queries_total: u64,
    pub prefix_cache_hits_total: u64,
    /// Prompt tokens whose KV came from a prefill pod (vLLM's
    /// `external_prefix_cache_hits`): neither computed here nor local hits.
    pub external_prefix_cache_hits_total: u64,
    /// Adapters of running requests (vLLM's `running_lora_adapters`).
    pub running_adapters: Vec<String>,
    /// Adapters of waiting requests (vLLM's `waiting_lora_adapters`).
    pub waiting_adapters: Vec<String>,
    /// Adapters loaded on the GPU, used or not.
    pub resident_adapters: Vec<String>,
    pub lora_loads_total: u64,
    pub requests_finished_total: u64,
    pub busy_seconds: f64,
}

#[derive(Debug, Clone)]
pub struct Engine {
    profile: EngineProfile,
    kv: KvCache,
    lora: LoraSlots,
    waiting: VecDeque<SimRequest>,
    running: Vec<Running>,
    prompt_tokens_total: u64,
    generation_tokens_total: u64,
    prefix_queries: u64,
    prefix_hits: u64,
    external_hits: u64,
    finished: u64,
    busy_seconds: f64,
    /// Real seconds per engine second in what the pod reports (see [`Engine::reporting_time_scale`]).
    reported_time_scale: f64,
    pub ttft: Histogram,
    pub itl: Histogram,
    /// Admission to first token (vLLM `request_prefill_time_seconds`).
    pub prefill: Histogram,
    /// The KV events this engine published, when recorded.
    kv_events: Option<KvEventLog>,
}

impl Engine {
    pub fn new(profile: EngineProfile) -> Self {
        Self {
            kv: KvCache::new(profile.num_gpu_blocks),
            lora: LoraSlots::new(profile.max_loras, profile.lora_load_ms),
            profile,
            waiting: VecDeque::new(),
            running: Vec::new(),
            prompt_tokens_total: 0,
            generation_tokens_total: 0,
            prefix_queries: 0,
            prefix_hits: 0,
            external_hits: 0,
            finished: 0,
            busy_seconds: 0.0,
            reported_time_scale: 1.0,
            ttft: Histogram::new(&TTFT_BUCKETS),
            itl: Histogram::new(&ITL_BUCKETS),
            prefill: Histogram::new(&TTFT_BUCKETS),
            kv_events: None,
        }
    }

    /// An engine that logs the KV events vLLM would publish (see `kv_events.rs`), for
    /// routers that index them.
    #[must_use]
    pub fn recording_kv_events(mut self) -> Self {
        self.kv.record_evictions();
        self.kv_events = Some(KvEventLog::default());
        self
    }

    /// The KV events published so far, oldest first; empty unless recorded.
    pub fn kv_events(&self) -> &[KvEvent] {
        self.kv_events.as_ref().map_or(&[], KvEventLog::events)
    }

    /// The KV events published since the last call, taken out of the log.
    pub fn take_kv_events(&mut self) -> Vec<KvEvent> {
        self.kv_events.as_mut().map(KvEventLog::take).unwrap_or_default()
    }

    /// An engine run `scale` times slower than its profile (the HTTP server's time
    /// scale) reports its latencies in the real seconds a client sees: its TTFT, ITL
    /// and prefill histograms and its busy time are `scale` times the engine's own. A
    /// router that learns speeds from them then learns the pod's real speed.
    #[must_use]
    pub fn reporting_time_scale(mut self, scale: f64) -> Self {
        self.reported_time_scale = if scale.is_finite() && scale > 0.0 { scale } else { 1.0 };
        self
    }

    pub fn profile(&self) -> &EngineProfile {
        &self.profile
    }

    pub fn submit(&mut self, request: SimRequest) {
        self.waiting.push_back(request);
    }

    /// How many leading prompt blocks of `hashes` this pod has cached now (the exact
    /// state a KV-event-driven router would see).
    pub fn cached_prefix_blocks(&self, hashes: &[u64]) -> usize {
        self.kv.cached_prefix(hashes)
    }

    /// Blocks of requests still to prefill (waiting or mid-prefill) and of requests
    /// decoding: what a KV-aware router such as Dynamo's tracks per worker.
    pub fn load_blocks(&self) -> (u64, u64) {
        let block = u64::from(self.profile.block_size.max(1));
        let waiting: u64 = self.waiting.iter().map(|r| u64::from(r.prompt_tokens).div_ceil(block)).sum();
        let mut prefill = waiting;
        let mut decode = 0;
        for run in &self.running {
            let blocks = (u64::from(run.request.prompt_tokens) + u64::from(run.generated)).div_ceil(block);
            if run.prefill_left > 0 {
                prefill += blocks;
            } else {
                decode += blocks;
            }
        }
        (prefill, decode)
    }

    /// The exact time to first token `request` would see here if no other request
    /// arrived: a copy of this engine runs forward until it emits that token.
    pub fn time_to_first_token(&self, request: SimRequest, now: f64) -> f64 {
        let id = request.id;
        let arrival = request.arrival;
        let mut engine = self.clone();
        engine.submit(request);
        let mut t = now;
        for _ in 0..1_000_000 {
            match engine.step(t) {
                Some(step) => {
                    t += step.duration;
                    if step.events.iter().any(|e| matches!(e, EngineEvent::FirstToken { id: i, .. } if *i == id)) {
                        return t - arrival;
                    }
                }
                None => match engine.wake_at(t) {
                    Some(wake) => t = wake,
                    None => break,
                },
            }
        }
        f64::INFINITY
    }

    /// Runs one step starting at `now`. `None` when nothing can run: the engine is idle,
    /// or every waiting request waits for an adapter load (see [`Engine::wake_at`]).
    pub fn step(&mut self, now: f64) -> Option<Step> {
        self.admit(now);
        if self.running.is_empty() {
            return None;
        }
        let mut budget = u64::from(self.profile.max_num_batched_tokens);
        let mut prefill_tokens = 0u64;
        let mut extra = 0.0;
        let mut chunks = vec![0u32; self.running.len()];
        // Decodes first, one token each, as vLLM's scheduler serves running requests
        // first; each reads its whole context from the KV cache.
        let mut context = 0u64;
        for run in &self.running {
            if run.prefill_left == 0 {
                budget = budget.saturating_sub(1);
                context += u64::from(run.request.prompt_tokens) + u64::from(run.generated);
            }
        }
        extra += self.profile.kv_read_seconds(context);
        for (run, chunk) in self.running.iter().zip(chunks.iter_mut()) {
            if run.prefill_left > 0 && budget > 0 {
                let take = u64::from(run.prefill_left).min(budget);
                budget -= take;
                prefill_tokens += take;
                *chunk = u32::try_from(take).unwrap_or(u32::MAX);
                // The chunk attends to every position before it, cached ones included.
                let from = u64::from(run.request.prompt_tokens - run.prefill_left);
                extra += self.profile.attention_seconds(from, from + take);
            }
        }
        let duration = self.profile.step_seconds(self.running.len(), prefill_tokens) + extra;
        let end = now + duration;
        if self.kv_events.is_some() {
            self.log_step_kv_events(&chunks, end);
        }
        self.busy_seconds += duration * self.reported_time_scale;
        let scale = self.reported_time_scale;
        let mut events = Vec::new();
        for (run, chunk) in self.running.iter_mut().zip(chunks) {
            if run.prefill_left == 0 {
                run.generated += 1;
                self.itl.observe((end - run.last_token_at) * scale);
                events.push(EngineEvent::Token { id: run.request.id, at: end });
            } else if chunk > 0 {
                run.prefill_left -= chunk;
                if run.prefill_left == 0 {
                    run.generated = 1;
                    self.ttft.observe((end - run.request.arrival) * scale);
                    self.prefill.observe((end - run.admitted_at) * scale);
                    // Like vLLM, prompt tokens are counted when the prefill completes.
                    self.prompt_tokens_total += u64::from(run.request.prompt_tokens);
                    events.push(EngineEvent::FirstToken { id: run.request.id, at: end, cached_tokens: run.cached });
                }
            }
            run.last_token_at = end;
        }
        self.finish_done(end, &mut events);
        if let Some(log) = &mut self.kv_events {
            log.push(end, KvEventKind::Removed, self.kv.take_evicted(), None);
        }
        Some(Step { duration, events })
    }

    /// Logs the step's KV events, at its end: the blocks evicted to admit its requests,
    /// then the prompt blocks its prefill chunks complete (a block the cache already
    /// held, found at admission, was stored by whoever computed it; a transferred
    /// prompt's blocks are stored when its one computed token is).
    fn log_step_kv_events(&mut self, chunks: &[u32], end: f64) {
        let Some(log) = &mut self.kv_events else { return };
        log.push(end, KvEventKind::Removed, self.kv.take_evicted(), None);
        let block = self.profile.block_size.max(1) as usize;
        for (run, &chunk) in self.running.iter().zip(chunks) {
            if chunk == 0 || run.prefill_left == 0 {
                continue;
            }
            let before = (run.request.prompt_tokens - run.prefill_left) as usize;
            let after = before + chunk as usize;
            let hit = run.allocation.hit_blocks as usize;
            let first = if run.request.kv_transferred { hit } else { (before / block).max(hit) };
            let last = (after / block).min(run.allocation.hashed.len());
            let stored = run.allocation.hashed.get(first..last).unwrap_or_default().to_vec();
            let parent = first.checked_sub(1).and_then(|i| run.allocation.hashed.get(i)).copied();
            log.push(end, KvEventKind::Stored, stored, parent);
        }
    }

    /// When a blocked engine can next make progress (an adapter finishes loading).
    pub fn wake_at(&mut self, now: f64) -> Option<f64> {
        let mut earliest: Option<f64> = None;
        for request in &self.waiting {
            if let Some(adapter) = &request.adapter {
                if let Residency::LoadingUntil(t) = self.lora.acquire_residency(adapter, now) {
                    earliest = Some(earliest.map_or(t, |e| e.min(t)));
                }
            }
        }
        earliest
    }

    fn admit(&mut self, now: f64) {
        let mut index = 0;
        while index < self.waiting.len() && self.running.len() < self.profile.max_num_seqs as usize {
            let Some(request) = self.waiting.get(index) else {
                break;
            };
            if let Some(adapter) = &request.adapter {
                if self.lora.acquire_residency(adapter, now) != Residency::Ready {
                    // vLLM skips requests whose adapter cannot run yet and goes on.
                    index += 1;
                    continue;
                }
            }
            let block_size = self.profile.block_size.max(1);
            let prompt_blocks = request.prompt_tokens.div_ceil(block_size) as u64;
            let output_blocks = request.output_tokens.div_ceil(block_size) as u64;
            let private = prompt_blocks.saturating_sub(request.block_hashes.len() as u64) + output_blocks;
            // Blocks for the whole output are reserved at admission: no preemption later.
            let Some(allocation) = self.kv.allocate(&request.block_hashes, private) else {
                break; // Head-of-line: FCFS waits for KV room.
            };
            let Some(request) = self.waiting.remove(index) else {
                break;
            };
            let local = (allocation.hit_blocks * u64::from(block_size)).min(u64::from(request.prompt_tokens) - 1);
            let local = u32::try_from(local).unwrap_or(0);
            self.prefix_queries += u64::from(request.prompt_tokens);
            self.prefix_hits += u64::from(local);
            // A transferred prompt is computed but for its last token (the blocks it
            // fills are then in this pod's prefix cache, as vLLM keeps them); only the
            // local hits count as prefix-cache hits.
            let cached = if request.kv_transferred { request.prompt_tokens - 1 } else { local };
            self.external_hits += u64::from(cached - local);
            if let Some(adapter) = &request.adapter {
                self.lora.start_using(adapter, now);
            }
            self.running.push(Running {
                prefill_left: request.prompt_tokens - cached,
                cached,
                request,
                allocation,
                generated: 0,
                last_token_at: now,
                admitted_at: now,
            });
        }
    }

    fn finish_done(&mut self, end: f64, events: &mut Vec<EngineEvent>) {
        let mut index = 0;
        while index < self.running.len() {
            let done =
                self.running.get(index).is_some_and(|r| r.prefill_left == 0 && r.generated >= r.request.output_tokens);
            if !done {
                index += 1;
                continue;
            }
            // `remove`, not `swap_remove`: the others keep their admission order, which the
            // prefill budget follows (vLLM's scheduler too).
            let run = self.running.remove(index);
            self.kv.release(&run.allocation);
            if let Some(adapter) = &run.request.adapter {
                self.lora.stop_using(adapter, end);
            }
            self.generation_tokens_total += u64::from(run.generated);
            self.finished += 1;
            events.push(EngineEvent::Finished { id: run.request.id, at: end });
        }
    }

    pub fn stats(&self, now: f64) -> EngineStats {
        let (resident_adapters, _loading) = self.lora.resident(now);
        let distinct = |adapters: &mut dyn Iterator<Item = &String>| {
            let mut list: Vec<String> = adapters.cloned().collect();
            list.sort();
            list.dedup();
            list
        };
        let running_adapters = distinct(&mut self.running.iter().filter_map(|r| r.request.adapter.as_ref()));
        let waiting_adapters = distinct(&mut self.waiting.iter().filter_map(|r| r.adapter.as_ref()));
        EngineStats {
            waiting: self.waiting.len(),
            running: self.running.len(),
            kv_cache_usage: self.kv.usage(),
            prompt_tokens_total: self.prompt_tokens_total,
            generation_tokens_total: self.generation_tokens_total,
            prefix_cache_queries_total: self.prefix_queries,
            prefix_cache_hits_total: self.prefix_hits,
            external_prefix_cache_hits_total: self.external_hits,
            running_adapters,
            waiting_adapters,
            resident_adapters,
            lora_loads_total: self.lora.loads(),
            requests_finished_total: self.finished,
            busy_seconds: self.busy_seconds,
        }
    }
}

#[cfg(test)]
mod tests;
