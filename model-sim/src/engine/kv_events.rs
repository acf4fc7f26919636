//! The KV events a vLLM engine publishes (`--kv-events-config`): a prompt block is
//! *stored* once the step that computes it ends (vLLM 0.11.1 and later publish a
//! step's events when its output is processed, `scheduler.update_from_output`), and
//! *removed* when it is evicted. Routers that index a pod's exact cache (llm-d's
//! precise prefix scorer, Dynamo's KV router, vllm-router's `kv_aware`) see it only
//! through these, some milliseconds after they happen; the engine's own cache, which
//! registers a block when it is allocated, is ahead of them.
//!
//! Recorded only when asked ([`super::Engine::recording_kv_events`]): the log grows
//! with every block computed.

/// What happened to some blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvEventKind {
    Stored,
    Removed,
}

/// One event: blocks (by hash) at the end of a step. A store is one request's run of
/// newly computed blocks, in prompt order, after `parent` (the block before them).
#[derive(Debug, Clone, PartialEq)]
pub struct KvEvent {
    pub at: f64,
    pub kind: KvEventKind,
    pub hashes: Vec<u64>,
    pub parent: Option<u64>,
}

/// An engine's events, in the order they were published.
#[derive(Debug, Clone, Default)]
pub struct KvEventLog {
    events: Vec<KvEvent>,
}

impl KvEventLog {
    pub fn push(&mut self, at: f64, kind: KvEventKind, hashes: Vec<u64>, parent: Option<u64>) {
        if !hashes.is_empty() {
            self.events.push(KvEvent { at, kind, hashes, parent });
        }
    }

    pub fn events(&self) -> &[KvEvent] {
        &self.events
    }

    /// The events so far, leaving the log empty: for a publisher that sends them on.
    pub fn take(&mut self) -> Vec<KvEvent> {
        std::mem::take(&mut self.events)
    }
}
