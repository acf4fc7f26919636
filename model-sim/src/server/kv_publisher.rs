//! A pod's KV events on the wire vLLM 0.32 publishes them on (`--kv-events-config` with
//! the `zmq` publisher, `vllm/distributed/kv_events.py`): a ZeroMQ PUB socket bound to
//! the endpoint, each batch a three-part message (topic, an 8-byte big-endian sequence
//! number, a MessagePack `KVEventBatch`). The batch is an array `[ts, events, rank]`,
//! the data-parallel rank null as vLLM sends it for one engine; each
//! event a map tagged by `type`: `BlockStored` (the run's block hashes, its parent, the
//! token ids of its blocks, the block size, `lora_id`, `medium`, `lora_name`) or
//! `BlockRemoved` (the hashes, `medium`). Routers that index exact caches (vllm-router's
//! `kv_aware`) subscribe to it.

use std::collections::HashMap;

use serde::Serialize;
use tokio::sync::mpsc;
use zeromq::{Socket, SocketSend, ZmqMessage};

use super::tokens::token_ids;
use crate::engine::{CHARS_PER_TOKEN, KvEvent, KvEventKind};

#[derive(Debug, Serialize)]
#[serde(tag = "type")]
enum WireEvent {
    BlockStored {
        block_hashes: Vec<u64>,
        parent_block_hash: Option<u64>,
        token_ids: Vec<u32>,
        block_size: u32,
        lora_id: Option<u32>,
        medium: Option<&'static str>,
        lora_name: Option<String>,
    },
    BlockRemoved {
        block_hashes: Vec<u64>,
        medium: Option<&'static str>,
    },
}

/// Where vLLM keeps these blocks.
const MEDIUM: Option<&str> = Some("GPU");

/// A block a store event may name: its token ids and adapter, how many unfinished
/// requests hold it, and whether the cache holds it (stored, not yet removed).
#[derive(Debug)]
struct KnownBlock {
    tokens: Vec<u32>,
    adapter: Option<String>,
    requests: u32,
    cached: bool,
}

/// The token ids of every full prompt block a store event may name, by its hash: those
/// of the blocks of every unfinished request, and of every block cached. A block is
/// forgotten once neither holds it, so a block evicted while a request waits is still
/// known when that request computes it again.
#[derive(Debug, Default)]
pub struct BlockTokens {
    blocks: HashMap<u64, KnownBlock>,
    /// Each unfinished request's blocks.
    requests: HashMap<u64, Vec<u64>>,
}

impl BlockTokens {
    /// Notes the blocks of submitted request `id` (`hashes`: its prompt's full blocks).
    pub fn note(&mut self, id: u64, prompt: &[u8], hashes: &[u64], block_size: u32, adapter: Option<&str>) {
        let block_bytes = block_size as usize * CHARS_PER_TOKEN;
        for (i, hash) in hashes.iter().enumerate() {
            let block = self.blocks.entry(*hash).or_insert_with(|| {
                let bytes = prompt.get(i * block_bytes..(i + 1) * block_bytes).unwrap_or_default();
                KnownBlock { tokens: token_ids(bytes), adapter: adapter.map(String::from), requests: 0, cached: false }
            });
            block.requests += 1;
        }
        self.requests.insert(id, hashes.to_vec());
    }

    /// Request `id` finished: its blocks are kept only while cached.
    pub fn finished(&mut self, id: u64) {
        for hash in self.requests.remove(&id).unwrap_or_default() {
            if let Some(block) = self.blocks.get_mut(&hash) {
                block.requests = block.requests.saturating_sub(1);
                if block.requests == 0 && !block.cached {
                    self.blocks.remove(&hash);
                }
            }
        }
    }

    /// The engine's events as vLLM sends them.
    fn wire(&mut self, events: Vec<KvEvent>, block_size: u32) -> Vec<WireEvent> {
        let mut out = Vec::new();
        for event in events {
            match event.kind {
                KvEventKind::Stored => {
                    let mut tokens = Vec::new();
                    let mut lora_name = None;
                    for hash in &event.hashes {
                        if let Some(block) = self.blocks.get_mut(hash) {
                            block.cached = true;
                            tokens.extend_from_slice(&block.tokens);
                            lora_name.clone_from(&block.adapter);
                        }
                    }
                    if tokens.len() != event.hashes.len() * block_size as usize {
                        tracing::warn!(
                            blocks = event.hashes.len(),
                            "a stored run's tokens are not known; not published"
                        );
                        continue;
                    }
                    out.push(WireEvent::BlockStored {
                        block_hashes: event.hashes,
                        parent_block_hash: event.parent,
                        token_ids: tokens,
                        block_size,
                        lora_id: None,
                        medium: MEDIUM,
                        lora_name,
                    });
                }
                KvEventKind::Removed => {
                    for hash in &event.hashes {
                        if let Some(block) = self.blocks.get_mut(hash) {
                            block.cached = false;
                            if block.requests == 0 {
                                self.blocks.remove(hash);
                            }
                        }
                    }
                    out.push(WireEvent::BlockRemoved { block_hashes: event.hashes, medium: MEDIUM });
                }
            }
        }
        out
    }
}

/// The publisher of one pod: a task that owns the socket.
#[derive(Clone)]
pub struct KvPublisher {
    batches: mpsc::UnboundedSender<Vec<u8>>,
}

impl KvPublisher {
    /// Binds `endpoint` (`tcp://HOST:PORT` or `ipc://PATH`) in a task of its own; a
    /// bind that fails is logged, and the pod serves without publishing.
    pub fn spawn(endpoint: String) -> Self {
        let (batches, mut receiver) = mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            let mut socket = zeromq::PubSocket::new();
            if let Err(e) = socket.bind(&endpoint).await {
                tracing::error!(%endpoint, error = %e, "cannot bind the KV event publisher; no KV events");
                return;
            }
            tracing::info!(%endpoint, "publishing KV events");
            let mut sequence = 0u64;
            while let Some(payload) = receiver.recv().await {
                let mut message = ZmqMessage::from(Vec::<u8>::new());
                message.push_back(sequence.to_be_bytes().to_vec().into());
                message.push_back(payload.into());
                if let Err(e) = socket.send(message).await {
                    tracing::warn!(%endpoint, error = %e, "a KV event batch was not sent");
                }
                sequence += 1;
            }
        });
        Self { batches }
    }

    /// Sends the engine's new events, stamped `ts` (Unix seconds).
    pub fn publish(&self, tokens: &mut BlockTokens, events: Vec<KvEvent>, block_size: u32, ts: f64) {
        if events.is_empty() {
            return;
        }
        let wire = tokens.wire(events, block_size);
        if wire.is_empty() {
            return;
        }
        match encode(ts, wire) {
            Ok(payload) => {
                let _ = self.batches.send(payload);
            }
            Err(e) => tracing::warn!(error = %e, "a KV event batch did not encode"),
        }
    }
}

/// A batch as vLLM encodes it: `[ts, events, data_parallel_rank]`, the rank null.
fn encode(ts: f64, events: Vec<WireEvent>) -> Result<Vec<u8>, rmp_serde::encode::Error> {
    rmp_serde::to_vec_named(&(ts, events, None::<u32>))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(hashes: &[u64]) -> KvEvent {
        KvEvent { at: 1.0, kind: KvEventKind::Stored, hashes: hashes.to_vec(), parent: None }
    }

    fn removed(hashes: &[u64]) -> KvEvent {
        KvEvent { at: 1.0, kind: KvEventKind::Removed, hashes: hashes.to_vec(), parent: None }
    }

    #[test]
    fn a_batch_is_an_array_of_the_time_the_tagged_maps_and_the_rank() {
        let mut tokens = BlockTokens::default();
        let prompt = vec![b'a'; 64 * 2];
        tokens.note(1, &prompt, &[11, 22], 16, None);
        let wire = tokens.wire(vec![stored(&[11, 22]), removed(&[11])], 16);
        let bytes = encode(5.5, wire).expect("encodes");
        let value: serde_json::Value = rmp_serde::from_slice(&bytes).expect("decodes");
        assert_eq!(value[0], 5.5);
        assert!(value[2].is_null(), "the data-parallel rank");
        let stored = &value[1][0];
        assert_eq!(stored["type"], "BlockStored");
        assert_eq!(stored["block_hashes"], serde_json::json!([11, 22]));
        assert_eq!(stored["token_ids"].as_array().map(Vec::len), Some(32));
        assert_eq!(stored["block_size"], 16);
        assert_eq!(stored["medium"], "GPU");
        assert!(stored["parent_block_hash"].is_null());
        assert_eq!(value[1][1]["type"], "BlockRemoved");
    }

    #[test]
    fn a_block_evicted_while_its_request_waits_is_still_known_when_computed_again() {
        let mut tokens = BlockTokens::default();
        let prompt = vec![b'a'; 64 * 2];
        tokens.note(1, &prompt, &[11, 22], 16, None);
        tokens.wire(vec![stored(&[11, 22])], 16);
        tokens.finished(1);
        // Request 2 arrives holding the cached blocks; they are evicted before it runs.
        tokens.note(2, &prompt, &[11, 22], 16, None);
        tokens.wire(vec![removed(&[11, 22])], 16);
        let again = tokens.wire(vec![stored(&[11, 22])], 16);
        assert!(matches!(&again[..], [WireEvent::BlockStored { token_ids, .. }] if token_ids.len() == 32), "{again:?}");
        // Finished and evicted: forgotten.
        tokens.finished(2);
        tokens.wire(vec![removed(&[11, 22])], 16);
        assert!(tokens.blocks.is_empty() && tokens.requests.is_empty());
    }
}
