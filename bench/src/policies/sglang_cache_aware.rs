//! Shepherd Model Gateway's (SGLang's router's) `cache_aware` policy, as of SMG v1.9.0,
//! for HTTP workers: `model_gateway/src/policies/cache_aware.rs`, its approximate string
//! tree `crates/kv_index/src/string_tree.rs`, and the defaults the binary ships in
//! `model_gateway/src/main.rs` (`--cache-threshold 0.3 --balance-abs-threshold 64
//! --balance-rel-threshold 1.5 --eviction-interval 120 --max-tree-size 67108864`; the
//! token-usage triggers are off).
//!
//! A worker's load is the router's own count of requests sent to it and not finished.
//! When the pool is imbalanced (`max − min > 64` and `max > 1.5·min`) the request goes to
//! the least loaded worker (ties: the fewest requests routed so far, then the lowest
//! index). Otherwise its text is matched, character by character, against one radix
//! tree of the texts routed so far, shared by all workers. If the match covers more
//! than 0.3 of the text's characters, the request goes to the worker that owns the
//! deepest matched node; otherwise to the least loaded worker. Whichever path chose
//! it, the text is inserted into the tree for that worker. Every 120 s each worker's
//! share of the tree is cut to 2^26 characters, least recently used leaves first.
//!
//! The text is what SMG routes a chat request on: every message's content joined by
//! single spaces, without roles. The bench renders prompts as `<|role|>content`, so the
//! markers are stripped here. All requests share one tree (SMG keys trees by the
//! workers' model, not by the request's adapter).

use super::{PickContext, Policy};
pub(super) use tree::Tree;

const CACHE_THRESHOLD: f32 = 0.3;
const BALANCE_ABS_THRESHOLD: u32 = 64;
const BALANCE_REL_THRESHOLD: f32 = 1.5;
const EVICTION_INTERVAL_S: f64 = 120.0;
const MAX_TREE_CHARS: usize = 1 << 26;

pub struct SglangCacheAware {
    tree: Tree,
    /// Requests routed to each worker so far (SMG's `processed`, a tie breaker).
    processed: Vec<u64>,
    next_eviction_s: f64,
}

impl SglangCacheAware {
    pub fn new(pods: usize) -> Self {
        Self { tree: Tree::default(), processed: vec![0; pods], next_eviction_s: EVICTION_INTERVAL_S }
    }
}

/// The text SMG routes a chat request on: its messages' non-empty contents joined by
/// single spaces. The rendered prompt is `<|role|>content` per message.
pub(super) fn routing_text(prompt: &[u8]) -> String {
    let rendered = String::from_utf8_lossy(prompt);
    let mut text = String::with_capacity(rendered.len());
    for (i, segment) in rendered.split("<|").enumerate() {
        let content = if i == 0 { segment } else { segment.split_once("|>").map_or(segment, |(_, c)| c) };
        if content.is_empty() {
            continue;
        }
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(content);
    }
    text
}

impl Policy for SglangCacheAware {
    fn name(&self) -> &'static str {
        "sglang_cache_aware"
    }

    fn pick(&mut self, ctx: &PickContext<'_>) -> usize {
        let n = ctx.in_flight.len().min(ctx.engines.len());
        if n == 0 {
            return 0;
        }
        if self.processed.len() < n {
            self.processed.resize(n, 0);
        }
        while ctx.now >= self.next_eviction_s {
            self.tree.evict(MAX_TREE_CHARS);
            self.next_eviction_s += EVICTION_INTERVAL_S;
        }
        let loads = &ctx.in_flight[..n];
        let max = loads.iter().copied().max().unwrap_or(0);
        let min = loads.iter().copied().min().unwrap_or(0);
        let least_loaded = (0..n).min_by_key(|&i| (loads[i], self.processed[i], i)).unwrap_or(0);
        let text = routing_text(&ctx.request.prompt.bytes());
        let worker = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);

        let chosen =
            if max.saturating_sub(min) > BALANCE_ABS_THRESHOLD && max as f32 > min as f32 * BALANCE_REL_THRESHOLD {
                self.tree.insert(&text, worker(least_loaded));
                Some(least_loaded)
            } else {
                let mut chosen = None;
                self.tree.match_and_insert_with(&text, |m| {
                    let rate = if m.input_chars == 0 { 0.0 } else { m.matched_chars as f32 / m.input_chars as f32 };
                    chosen = if rate > CACHE_THRESHOLD {
                        m.worker.map(|w| w as usize).filter(|&w| w < n)
                    } else {
                        Some(least_loaded)
                    };
                    chosen.map(worker)
                });
                chosen
            };
        match chosen {
            Some(pod) => {
                self.processed[pod] += 1;
                pod
            }
            // A match whose node no worker holds: SMG takes the first worker and
            // records nothing.
            None => 0,
        }
    }
}

/// SMG's approximate string tree: a radix tree over characters, shared by all workers,
/// whose nodes record which workers hold them and when each last used them.
mod tree {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    type NodeId = usize;
    const ROOT: NodeId = 0;

    #[derive(Debug, Default)]
    struct Node {
        /// The edge's characters (empty at the root).
        text: String,
        chars: usize,
        parent: Option<NodeId>,
        /// Children by their first character.
        children: Vec<(char, NodeId)>,
        /// Workers holding the node, each with the epoch it last ended a text here (0 when
        /// its texts only passed through).
        workers: Vec<(u32, u64)>,
        /// The worker a match ending here resolves to, while it still holds the node: the
        /// one whose insert created it.
        last_worker: Option<u32>,
    }

    impl Node {
        fn stamp(&self, worker: u32) -> Option<u64> {
            self.workers.iter().find(|(w, _)| *w == worker).map(|(_, s)| *s)
        }

        fn holds(&self, worker: u32) -> bool {
            self.stamp(worker).is_some()
        }

        fn set_stamp(&mut self, worker: u32, epoch: u64) {
            match self.workers.iter_mut().find(|(w, _)| *w == worker) {
                Some(entry) => entry.1 = epoch,
                None => self.workers.push((worker, epoch)),
            }
        }

        fn child(&self, first: char) -> Option<NodeId> {
            self.children.iter().find(|(c, _)| *c == first).map(|(_, id)| *id)
        }
    }

    /// What a match found: how many of the text's characters the tree holds, and the
    /// worker that owns the deepest matched node (`None` if no worker does).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Match {
        pub matched_chars: usize,
        pub input_chars: usize,
        pub worker: Option<u32>,
    }

    #[derive(Debug)]
    pub struct Tree {
        nodes: Vec<Node>,
        free: Vec<NodeId>,
        /// Characters each worker holds.
        held: Vec<usize>,
        /// The LRU clock: every insert and match takes a tick.
        epoch: u64,
    }

    impl Default for Tree {
        fn default() -> Self {
            Self { nodes: vec![Node::default()], free: Vec::new(), held: Vec::new(), epoch: 0 }
        }
    }

    /// Bytes `a` and `b` share from the start, cut back to a character boundary.
    fn shared_prefix(a: &str, b: &str) -> usize {
        let mut shared = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        while !a.is_char_boundary(shared) {
            shared -= 1;
        }
        shared
    }

    impl Tree {
        /// Characters `worker` holds.
        pub fn chars_of(&self, worker: u32) -> usize {
            self.held.get(worker as usize).copied().unwrap_or(0)
        }

        fn tick(&mut self) -> u64 {
            let epoch = self.epoch;
            self.epoch += 1;
            epoch
        }

        fn alloc(&mut self, node: Node) -> NodeId {
            match self.free.pop() {
                Some(id) => {
                    self.nodes[id] = node;
                    id
                }
                None => {
                    self.nodes.push(node);
                    self.nodes.len() - 1
                }
            }
        }

        /// `worker`'s text passes through `node`: it holds it from now on, if not already.
        fn pass_through(&mut self, node: NodeId, worker: u32) {
            if !self.nodes[node].holds(worker) {
                self.nodes[node].workers.push((worker, 0));
                let index = worker as usize;
                if self.held.len() <= index {
                    self.held.resize(index + 1, 0);
                }
                self.held[index] += self.nodes[node].chars;
            }
        }

        /// Inserts `text` for `worker`, from the root.
        pub fn insert(&mut self, text: &str, worker: u32) {
            self.pass_through(ROOT, worker);
            self.insert_from(ROOT, text, worker);
        }

        /// Matches `text` against the tree, then inserts it for the worker `select` names
        /// from the match (none: nothing is inserted).
        pub fn match_and_insert_with(&mut self, text: &str, select: impl FnOnce(&Match) -> Option<u32>) -> Match {
            let (mut pos, mut matched) = (0, 0);
            let (mut current, mut deepest) = (ROOT, ROOT);
            let mut path = Vec::new();
            while let Some(first) = text[pos..].chars().next() {
                let Some(child) = self.nodes[current].child(first) else { break };
                let edge = self.nodes[child].text.len();
                let shared = shared_prefix(&text[pos..], &self.nodes[child].text);
                matched = pos + shared;
                deepest = child;
                if shared < edge {
                    break;
                }
                path.push(child);
                pos += shared;
                current = child;
            }
            let worker = self.resolve(deepest);
            // SMG refreshes the matched worker's stamp on one match in eight.
            let epoch = self.tick();
            if let Some(w) = worker.filter(|_| epoch & 7 == 0) {
                self.nodes[deepest].set_stamp(w, epoch);
            }
            let result =
                Match { matched_chars: text[..matched].chars().count(), input_chars: text.chars().count(), worker };
            let Some(worker) = select(&result) else { return result };
            self.pass_through(ROOT, worker);
            for &node in &path {
                self.pass_through(node, worker);
            }
            if pos == text.len() {
                let epoch = self.tick();
                self.nodes[current].set_stamp(worker, epoch);
            } else {
                self.insert_from(current, &text[pos..], worker);
            }
            result
        }

        /// The worker a match ending at `node` goes to: the node's creator while it still
        /// holds it, else the first worker that does.
        fn resolve(&mut self, node: NodeId) -> Option<u32> {
            let node = &mut self.nodes[node];
            if let Some(w) = node.last_worker.filter(|w| node.holds(*w)) {
                return Some(w);
            }
            let first = node.workers.first().map(|(w, _)| *w);
            if first.is_some() {
                node.last_worker = first;
            }
            first
        }

        fn insert_from(&mut self, start: NodeId, text: &str, worker: u32) {
            let (mut prev, mut rest) = (start, text);
            while let Some(first) = rest.chars().next() {
                let Some(child) = self.nodes[prev].child(first) else {
                    let epoch = self.tick();
                    let chars = rest.chars().count();
                    let leaf = self.alloc(Node {
                        text: rest.to_owned(),
                        chars,
                        parent: Some(prev),
                        children: Vec::new(),
                        workers: Vec::new(),
                        last_worker: Some(worker),
                    });
                    self.nodes[prev].children.push((first, leaf));
                    self.pass_through(leaf, worker);
                    self.nodes[leaf].set_stamp(worker, epoch);
                    return;
                };
                let shared = shared_prefix(rest, &self.nodes[child].text);
                let next = if shared < self.nodes[child].text.len() { self.split(prev, child, shared) } else { child };
                self.pass_through(next, worker);
                prev = next;
                rest = &rest[shared..];
            }
            let epoch = self.tick();
            self.nodes[prev].set_stamp(worker, epoch);
        }

        /// Splits `child`'s edge after `at` bytes; the new upper node, which inherits the
        /// child's workers, takes its place under `parent`.
        fn split(&mut self, parent: NodeId, child: NodeId, at: usize) -> NodeId {
            let suffix = self.nodes[child].text.split_off(at);
            let head_text = std::mem::replace(&mut self.nodes[child].text, suffix);
            let head_chars = head_text.chars().count();
            let suffix_first = self.nodes[child].text.chars().next().unwrap_or_default();
            let head = self.alloc(Node {
                text: head_text,
                chars: head_chars,
                parent: Some(parent),
                children: vec![(suffix_first, child)],
                workers: self.nodes[child].workers.clone(),
                last_worker: self.nodes[child].last_worker,
            });
            self.nodes[child].chars -= head_chars;
            self.nodes[child].parent = Some(head);
            if let Some(entry) = self.nodes[parent].children.iter_mut().find(|(_, id)| *id == child) {
                entry.1 = head;
            }
            head
        }

        /// Whether no child of `node` is held by `worker`.
        fn is_leaf_for(&self, node: NodeId, worker: u32) -> bool {
            !self.nodes[node].children.iter().any(|(_, c)| self.nodes[*c].holds(worker))
        }

        /// Cuts every worker's share to `max_chars`: its leaves are dropped, least
        /// recently used first, and a parent left as a leaf queues in turn. Nodes no worker
        /// holds any more go.
        pub fn evict(&mut self, max_chars: usize) {
            let mut queue = BinaryHeap::new();
            let mut stack = vec![ROOT];
            while let Some(id) = stack.pop() {
                stack.extend(self.nodes[id].children.iter().map(|(_, c)| *c));
                for &(worker, stamp) in &self.nodes[id].workers {
                    if self.is_leaf_for(id, worker) {
                        queue.push(Reverse((stamp, id, worker)));
                    }
                }
            }
            while let Some(Reverse((_, id, worker))) = queue.pop() {
                if self.chars_of(worker) <= max_chars || !(self.nodes[id].holds(worker) && self.is_leaf_for(id, worker))
                {
                    continue;
                }
                let chars = self.nodes[id].chars;
                if let Some(held) = self.held.get_mut(worker as usize) {
                    *held = held.saturating_sub(chars);
                }
                self.nodes[id].workers.retain(|(w, _)| *w != worker);
                let Some(parent) = self.nodes[id].parent else { continue };
                if self.nodes[id].children.is_empty() && self.nodes[id].workers.is_empty() {
                    self.nodes[parent].children.retain(|(_, c)| *c != id);
                    self.nodes[id] = Node::default();
                    self.free.push(id);
                }
                if let Some(stamp) = self.nodes[parent].stamp(worker) {
                    if self.is_leaf_for(parent, worker) {
                        queue.push(Reverse((stamp, parent, worker)));
                    }
                }
            }
        }
    }
}
