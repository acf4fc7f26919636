//! Runs one pod's engine in scaled real time: steps back to back while there is work,
//! sleeps (on timers, not the CPU) until each step's end, then delivers its events to
//! the waiting HTTP handlers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::engine::{Engine, EngineEvent, EngineProfile, EngineStats, Histogram, SimRequest};

/// A request to run, and where to send its events.
pub struct Submission {
    pub prompt: Vec<u8>,
    pub output_tokens: u32,
    pub adapter: Option<String>,
    pub events: mpsc::UnboundedSender<EngineEvent>,
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
    published: Arc<Mutex<Published>>,
}

impl DriverHandle {
    /// Starts the driver task; it ends when every handle is dropped.
    pub fn spawn(profile: EngineProfile, time_scale: f64) -> Self {
        let time_scale = time_scale.max(1e-6);
        let engine = Engine::new(profile).reporting_time_scale(time_scale);
        let published = Arc::new(Mutex::new(Published {
            stats: engine.stats(0.0),
            ttft: engine.ttft.clone(),
            itl: engine.itl.clone(),
            prefill: engine.prefill.clone(),
        }));
        let (submissions, receiver) = mpsc::unbounded_channel();
        tokio::spawn(drive(engine, receiver, Arc::clone(&published), time_scale));
        Self { submissions, published }
    }

    /// Queues a request; events arrive on the returned channel.
    pub fn submit(
        &self,
        prompt: Vec<u8>,
        output_tokens: u32,
        adapter: Option<String>,
    ) -> mpsc::UnboundedReceiver<EngineEvent> {
        let (events, receiver) = mpsc::unbounded_channel();
        let _ = self.submissions.send(Submission { prompt, output_tokens, adapter, events });
        receiver
    }

    pub fn published(&self) -> Option<Published> {
        self.published.lock().ok().map(|p| p.clone())
    }
}

async fn drive(
    mut engine: Engine,
    mut submissions: mpsc::UnboundedReceiver<Submission>,
    published: Arc<Mutex<Published>>,
    time_scale: f64,
) {
    let start = Instant::now();
    let virtual_now = || start.elapsed().as_secs_f64() / time_scale;
    let real_at = |virtual_s: f64| start + Duration::from_secs_f64(virtual_s * time_scale);
    let block_size = engine.profile().block_size;
    let mut listeners: HashMap<u64, mpsc::UnboundedSender<EngineEvent>> = HashMap::new();
    let mut next_id = 0u64;
    let mut accept = |engine: &mut Engine, listeners: &mut HashMap<u64, _>, s: Submission, now: f64| {
        next_id += 1;
        engine.submit(SimRequest::from_text(next_id, now, &s.prompt, s.output_tokens, s.adapter, block_size));
        listeners.insert(next_id, s.events);
    };
    loop {
        while let Ok(submission) = submissions.try_recv() {
            accept(&mut engine, &mut listeners, submission, virtual_now());
        }
        let now = virtual_now();
        match engine.step(now) {
            Some(step) => {
                tokio::time::sleep_until(real_at(now + step.duration)).await;
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
                        Some(submission) => accept(&mut engine, &mut listeners, submission, virtual_now()),
                        None => return,
                    },
                    () = next => {}
                }
            }
        }
    }
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
