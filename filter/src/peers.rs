//! Shares prefix ownership between Envoy workers. Each worker's router registers its own
//! shared queue and lists it in shared data; when a pod starts answering a request, the
//! worker that routed it records the prompt's blocks locally and enqueues the record on
//! every other worker's queue. Each worker thus keeps a full local index, read without
//! any shared-data copy on the request path.

use std::cell::{Cell, RefCell};

use infergate_core::filter_config::{PREFIX_PEERS_KEY, PREFIX_QUEUE_PREFIX};

use crate::host;

/// Queue names kept in the registry; older ones (reloaded VMs) drop off.
const MAX_PEERS: usize = 64;
const CAS_ATTEMPTS: usize = 16;

pub struct PrefixPeers {
    vm_id: String,
    own_name: String,
    own_queue: Option<u32>,
    /// Other workers' queues, resolved lazily.
    peers: RefCell<Vec<(String, Option<u32>)>>,
    /// The registry version the peer list was read at.
    seen_cas: Cell<Option<u32>>,
}

impl PrefixPeers {
    pub fn register(vm_id: &str, random: u64) -> Self {
        let own_name = format!("{PREFIX_QUEUE_PREFIX}{random:016x}");
        let own_queue = match host::register_queue(&own_name) {
            Ok(id) => Some(id),
            Err(status) => {
                log::warn!(
                    "infergate router: cannot register {own_name}, prefix records from other workers are lost: {status:?}"
                );
                None
            }
        };
        if own_queue.is_some() {
            add_to_registry(&own_name);
        }
        Self {
            vm_id: vm_id.to_string(),
            own_name,
            own_queue,
            peers: RefCell::new(Vec::new()),
            seen_cas: Cell::new(None),
        }
    }

    pub fn own_queue(&self) -> Option<u32> {
        self.own_queue
    }

    /// Enqueues `record` on every other worker's queue.
    pub fn broadcast(&self, record: &[u8]) {
        self.refresh();
        let Ok(mut peers) = self.peers.try_borrow_mut() else { return };
        for (name, queue) in peers.iter_mut() {
            if queue.is_none() {
                *queue = host::resolve_queue(&self.vm_id, name);
            }
            if let Some(id) = *queue {
                if host::enqueue(id, record).is_err() {
                    *queue = None;
                }
            }
        }
    }

    fn refresh(&self) {
        let (value, cas) = host::shared_data_with_cas(PREFIX_PEERS_KEY);
        if cas == self.seen_cas.get() {
            return;
        }
        self.seen_cas.set(cas);
        let names = registry_names(value.as_deref());
        let Ok(mut peers) = self.peers.try_borrow_mut() else { return };
        peers.retain(|(name, _)| names.contains(name));
        for name in names {
            if name != self.own_name && !peers.iter().any(|(n, _)| *n == name) {
                peers.push((name, None));
            }
        }
    }
}

fn registry_names(value: Option<&[u8]>) -> Vec<String> {
    value
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .map(|text| text.lines().filter(|l| l.starts_with(PREFIX_QUEUE_PREFIX)).map(String::from).collect())
        .unwrap_or_default()
}

fn add_to_registry(name: &str) {
    for _ in 0..CAS_ATTEMPTS {
        let (value, cas) = host::shared_data_with_cas(PREFIX_PEERS_KEY);
        let mut names = registry_names(value.as_deref());
        names.push(name.to_string());
        let skip = names.len().saturating_sub(MAX_PEERS);
        let text = names.into_iter().skip(skip).collect::<Vec<_>>().join("\n");
        if host::set_shared_data_cas(PREFIX_PEERS_KEY, text.as_bytes(), cas).is_ok() {
            return;
        }
    }
    log::warn!("infergate router: could not list {name} among the prefix peers");
}
