//! Runs one pod's engine in scaled real time: steps back to back while there is work,
//! sleeps (on timers, not the CPU) until each step's end, then delivers its events to
//! the waiting HTTP handlers. Meanwhile it answers how much of a prompt its prefix
//! cache holds, which a decode leg's KV transfer need not move.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::kv_publisher::{BlockTokens, KvPublisher};
use crate::engine::{
    CHARS_PER_TOKEN, Engine, EngineEvent, EngineProfile, EngineStats, Histogram, SimRequest, block_hashes,
};

/// A request to run, and where to send its events.
pub struct Submission {
    pub prompt: Vec<u8>,
    pub output_tokens: u32,
    pub adapter: Option<String>,
    pub events: mpsc::UnboundedSender<EngineEvent>,
    /// The decode leg of a split request: its prompt's KV came from a prefill pod.
    pub kv_transferred: bool,
    /// Engine seconds the request waited before it reached the engine (its KV
    /// transfer): counted in its time to first token, as vLLM counts it.
    pub waited_s: f64,
}

/// How much of a prompt this pod has in its prefix cache now.
struct CacheQuery {
    prompt: Vec<u8>,
    adapter: Option<String>,
    reply: oneshot::Sender<u32>,
}

/// What `/metrics` reads, refreshed after every step.
#[derive(Debug, Clone)]
pub struct Published {
    pub stats: EngineStats,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub prefill: Histogram,
}

#[derive(Clone)]
pub struct DriverHandle {
    submissions: mpsc::UnboundedSender<Submission>,
    queries: mpsc::UnboundedSender<CacheQuery>,
    published: Arc<Mutex<Published>>,
}

impl DriverHandle {
    /// Starts the driver task; it ends when every handle is dropped. With a
    /// `kv_events` endpoint, the engine's KV events are published there as vLLM does.
    pub fn spawn(profile: EngineProfile, time_scale: f64, kv_events: Option<String>) -> Self {
        let time_scale = time_scale.max(1e-6);
        let engine = Engine::new(profile).reporting_time_scale(time_scale);
        let engine = if kv_events.is_some() { engine.recording_kv_events() } else { engine };
        let publisher = kv_events.map(KvPublisher::spawn);
        let published = Arc::new(Mutex::new(Published {
            stats: engine.stats(0.0),
            ttft: engine.ttft.clone(),
            itl: engine.itl.clone(),
            prefill: engine.prefill.clone(),
        }));
        let (submissions, receiver) = mpsc::unbounded_channel();
        let (queries, query_receiver) = mpsc::unbounded_channel();
        tokio::spawn(drive(engine, receiver, query_receiver, Arc::clone(&published), time_scale, publisher));
        Self { submissions, queries, published }
    }

    /// Queues a request; events arrive on the returned channel.
    pub fn submit(
        &self,
        prompt: Vec<u8>,
        output_tokens: u32,
        adapter: Option<String>,
    ) -> mpsc::UnboundedReceiver<EngineEvent> {
        self.send(prompt, output_tokens, adapter, None)
    }

    /// Queues the decode leg of a split request, whose prompt's KV arrived after
    /// `waited_s` engine seconds.
    pub fn submit_transferred(
        &self,
        prompt: Vec<u8>,
        output_tokens: u32,
        adapter: Option<String>,
        waited_s: f64,
    ) -> mpsc::UnboundedReceiver<EngineEvent> {
        self.send(prompt, output_tokens, adapter, Some(waited_s))
    }

    fn send(
        &self,
        prompt: Vec<u8>,
        output_tokens: u32,
        adapter: Option<String>,
        transferred_after_s: Option<f64>,
    ) -> mpsc::UnboundedReceiver<EngineEvent> {
        let (events, receiver) = mpsc::unbounded_channel();
        let _ = self.submissions.send(Submission {
            prompt,
            output_tokens,
            adapter,
            events,
            kv_transferred: transferred_after_s.is_some(),
            waited_s: transferred_after_s.unwrap_or(0.0).max(0.0),
        });
        receiver
    }

    /// The prompt tokens this pod's prefix cache holds now (as vLLM counts a hit: all
    /// but the last token at most), which a KV transfer need not move.
    pub async fn cached_prompt_tokens(&self, prompt: Vec<u8>, adapter: Option<String>) -> u32 {
        let (reply, answer) = oneshot::channel();
        if self.queries.send(CacheQuery { prompt, adapter, reply }).is_err() {
            return 0;
        }
        answer.await.unwrap_or(0)
    }

    pub fn published(&self) -> Option<Published> {
        self.published.lock().ok().map(|p| p.clone())
    }
}

async fn drive(
    mut engine: Engine,
    mut submissions: mpsc::UnboundedReceiver<Submission>,
    mut queries: mpsc::UnboundedReceiver<CacheQuery>,
    published: Arc<Mutex<Published>>,
    time_scale: f64,
    publisher: Option<KvPublisher>,
) {
    let start = Instant::now();
    let mut block_tokens = BlockTokens::default();
    let virtual_now = || start.elapsed().as_secs_f64() / time_scale;
    let real_at = |virtual_s: f64| start + Duration::from_secs_f64(virtual_s * time_scale);
    let block_size = engine.profile().block_size;
    let mut listeners: HashMap<u64, mpsc::UnboundedSender<EngineEvent>> = HashMap::new();
    let mut next_id = 0u64;
    let noting = publisher.is_some();
    let mut accept =
        |engine: &mut Engine, listeners: &mut HashMap<u64, _>, tokens: &mut BlockTokens, s: Submission, now: f64| {
            next_id += 1;
            let request =
                SimRequest::from_text(next_id, now - s.waited_s, &s.prompt, s.output_tokens, s.adapter, block_size);
            if noting {
                tokens.note(next_id, &s.prompt, &request.block_hashes, block_size, request.adapter.as_deref());
            }
            engine.submit(if s.kv_transferred { request.with_transferred_kv() } else { request });
            listeners.insert(next_id, s.events);
        };
    loop {
        while let Ok(submission) = submissions.try_recv() {
            accept(&mut engine, &mut listeners, &mut block_tokens, submission, virtual_now());
        }
        let now = virtual_now();
        match engine.step(now) {
            Some(step) => {
                let end = real_at(now + step.duration);
                loop {
                    tokio::select! {
                        () = tokio::time::sleep_until(end) => break,
                        Some(query) = queries.recv() => answer(&engine, query),
                    }
                }
                // The step's KV events first: a request that finishes in the step that
                // stores its last blocks still has their token ids noted.
                if let Some(publisher) = &publisher {
                    let unix_s = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64());
                    publisher.publish(&mut block_tokens, engine.take_kv_events(), block_size, unix_s);
                }
                for event in step.events {
                    let (id, done) = match event {
                        EngineEvent::FirstToken { id, .. } | EngineEvent::Token { id, .. } => (id, false),
                        EngineEvent::Finished { id, .. } => (id, true),
                    };
                    if let Some(listener) = listeners.get(&id) {
                        let _ = listener.send(event);
                    }
                    if done {
                        listeners.remove(&id);
                        block_tokens.finished(id);
                    }
                }
                publish(&engine, &published, virtual_now());
            }
            None => {
                publish(&engine, &published, now);
                let wake = engine.wake_at(now).map(real_at);
                let next = async {
                    match wake {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    submission = submissions.recv() => match submission {
                        Some(submission) => accept(&mut engine, &mut listeners, &mut block_tokens, submission, virtual_now()),
                        None => return,
                    },
                    Some(query) = queries.recv() => answer(&engine, query),
                    () = next => {}
                }
            }
        }
    }
}

fn answer(engine: &Engine, query: CacheQuery) {
    let block_size = engine.profile().block_size;
    let prompt_tokens = u32::try_from(query.prompt.len().div_ceil(CHARS_PER_TOKEN)).unwrap_or(u32::MAX).max(1);
    let hashes = block_hashes(&query.prompt, query.adapter.as_deref(), block_size);
    let cached = u32::try_from(engine.cached_prefix_blocks(&hashes)).unwrap_or(u32::MAX).saturating_mul(block_size);
    let _ = query.reply.send(cached.min(prompt_tokens - 1));
}

fn publish(engine: &Engine, published: &Mutex<Published>, now: f64) {
    if let Ok(mut slot) = published.lock() {
        *slot = Published {
            stats: engine.stats(now),
            ttft: engine.ttft.clone(),
            itl: engine.itl.clone(),
            prefill: engine.prefill.clone(),
        };
    }
}
