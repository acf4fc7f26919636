//! A pod's KV events on the wire vLLM 0.32 publishes them on (`--kv-events-config` with
//! the `zmq` publisher, `vllm/distributed/kv_events.py`): a ZeroMQ PUB socket bound to
//! the endpoint, each batch a three-part message (topic, an 8-byte big-endian sequence
//! number, a MessagePack `KVEventBatch`). The batch is an array `[ts, events]`; each
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

/// The token ids of each full prompt block the pod has been asked to compute, by its
/// hash, until its removal is published: a store event carries them.
#[derive(Debug, Default)]
pub struct BlockTokens {
    blocks: HashMap<u64, (Vec<u32>, Option<String>)>,
}

impl BlockTokens {
    /// Notes the blocks of a submitted prompt (`hashes`: its full blocks' chain).
    pub fn note(&mut self, prompt: &[u8], hashes: &[u64], block_size: u32, adapter: Option<&str>) {
        let block_bytes = block_size as usize * CHARS_PER_TOKEN;
        for (i, hash) in hashes.iter().enumerate() {
            self.blocks.entry(*hash).or_insert_with(|| {
                let bytes = prompt.get(i * block_bytes..(i + 1) * block_bytes).unwrap_or_default();
                (token_ids(bytes), adapter.map(String::from))
            });
        }
    }

    /// The engine's events as vLLM sends them; a removed block is forgotten.
    fn wire(&mut self, events: Vec<KvEvent>, block_size: u32) -> Vec<WireEvent> {
        let mut out = Vec::new();
        for event in events {
            match event.kind {
                KvEventKind::Stored => {
                    let mut tokens = Vec::new();
                    let mut lora_name = None;
                    for hash in &event.hashes {
                        if let Some((ids, adapter)) = self.blocks.get(hash) {
                            tokens.extend_from_slice(ids);
                            lora_name.clone_from(adapter);
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
                        self.blocks.remove(hash);
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
        // `[ts, events, data_parallel_rank]`, the rank null as vLLM sends it.
        match rmp_serde::to_vec_named(&(ts, wire, None::<u32>)) {
            Ok(payload) => {
                let _ = self.batches.send(payload);
            }
            Err(e) => tracing::warn!(error = %e, "a KV event batch did not encode"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_an_array_of_the_time_and_tagged_maps() {
        let mut tokens = BlockTokens::default();
        let prompt = vec![b'a'; 64 * 2];
        tokens.note(&prompt, &[11, 22], 16, None);
        let events = vec![
            KvEvent { at: 1.0, kind: KvEventKind::Stored, hashes: vec![11, 22], parent: None },
            KvEvent { at: 1.0, kind: KvEventKind::Removed, hashes: vec![11], parent: None },
        ];
        let wire = tokens.wire(events, 16);
        let bytes = rmp_serde::to_vec_named(&(5.5, wire)).expect("encodes");
        let value: serde_json::Value = rmp_serde::from_slice(&bytes).expect("decodes");
        assert_eq!(value[0], 5.5);
        let stored = &value[1][0];
        assert_eq!(stored["type"], "BlockStored");
        assert_eq!(stored["block_hashes"], serde_json::json!([11, 22]));
        assert_eq!(stored["token_ids"].as_array().map(Vec::len), Some(32));
        assert_eq!(stored["block_size"], 16);
        assert_eq!(stored["medium"], "GPU");
        assert!(stored["parent_block_hash"].is_null());
        assert_eq!(value[1][1]["type"], "BlockRemoved");
        assert!(!tokens.blocks.contains_key(&11) && tokens.blocks.contains_key(&22), "removed blocks are forgotten");
    }
}
