//! An Envoy of several workers in one process, for the filter's unit tests: every
//! worker is one VM with its own root context and its own `FakeHost`; they share one
//! compare-and-swap map, one set of shared queues and one set of stats, as Envoy's
//! workers do. A queue lives as long as its `vm_id` (here: the whole `FakeEnvoy`), and
//! an enqueue wakes the root that registered it when the test calls `deliver`. The
//! clock moves only when the test says so. Any host call can be made to fail.
//!
//! Each stream's state lives in the process, by context id: a stream callback works on
//! its own stream, a root callback on the stream it made effective. An HTTP call's
//! answer goes back to the context whose callback dispatched it, as the SDK routes it.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::rc::Rc;

use super::events::{Flow, RootEvents, StreamEvents};
use super::{Host, MetricKind, Status};
use crate::plugin;

/// One queue, as Envoy keeps it: named under a `vm_id`, owned by the root that
/// registered it last.
struct Queue {
    vm_id: String,
    name: String,
    owner: usize,
    items: VecDeque<Vec<u8>>,
    /// An enqueue happened since the owner was last woken.
    wake: bool,
}

/// One stat, shared by every VM that defines its name.
#[derive(Debug, Clone, Default)]
pub struct Stat {
    pub value: i64,
    pub samples: Vec<u64>,
}

/// Whose callback dispatched an HTTP call: its answer goes back there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A root callback of this worker (a tick, say), whatever stream it made effective.
    Root(usize),
    /// A stream's own callback.
    Stream(u32),
}

/// An HTTP call a root or a stream dispatched.
#[derive(Debug, Clone)]
pub struct HttpCall {
    pub cluster: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub timeout_ms: u64,
    /// Its token, which its answer carries.
    pub token: u32,
    pub caller: Caller,
}

impl HttpCall {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// The answer to an HTTP call, while its callback runs.
struct CallAnswer {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

#[derive(Default)]
struct EnvoyState {
    clock_ms: Cell<u64>,
    shared: RefCell<HashMap<String, (Vec<u8>, u32)>>,
    queues: RefCell<Vec<Queue>>,
    metric_names: RefCell<Vec<String>>,
    stats: RefCell<BTreeMap<String, Stat>>,
    env: RefCell<HashMap<String, String>>,
    failing: RefCell<HashSet<&'static str>>,
    /// Host calls made, by method, since the test last took them.
    calls: RefCell<BTreeMap<&'static str, u64>>,
    http_calls: RefCell<Vec<HttpCall>>,
    /// The call answer being delivered: `Some(None)` for a failed call.
    call_answer: RefCell<Option<Option<CallAnswer>>>,
    /// Each worker's root, `None` once torn down (or never configured).
    roots: RefCell<Vec<Option<Box<dyn RootEvents>>>>,
    /// Each worker's tick period and when it last ticked.
    ticks: RefCell<Vec<(u64, u64)>>,
    /// The stream a root callback made effective, until the callback returns.
    effective: Cell<Option<u32>>,
    /// The stream whose own callback runs.
    current: Cell<Option<u32>>,
    /// Every stream's state, by context id.
    streams: RefCell<HashMap<u32, Rc<RefCell<StreamState>>>>,
    next_context: Cell<u32>,
}

/// The name [`FakeEnvoy::take_host_calls`] counts stream callbacks under: each is an
/// entry into the VM.
pub const STREAM_CALLBACK: &str = "(stream callback)";

impl EnvoyState {
    fn count(&self, call: &'static str) {
        *self.calls.borrow_mut().entry(call).or_default() += 1;
    }

    fn fails(&self, call: &'static str) -> bool {
        self.failing.borrow().contains(call)
    }

    /// The stream host calls act on: the effective one in a root callback, else the
    /// one whose callback runs; a detached state when there is neither.
    fn stream(&self) -> Rc<RefCell<StreamState>> {
        let id = self.effective.get().or(self.current.get());
        id.and_then(|id| self.streams.borrow().get(&id).cloned()).unwrap_or_default()
    }
}

/// The process: its workers, shared data, queues and stats.
pub struct FakeEnvoy {
    state: Rc<EnvoyState>,
}

impl Default for FakeEnvoy {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeEnvoy {
    pub fn new() -> Self {
        capture_logs();
        let state = EnvoyState { clock_ms: Cell::new(1_700_000_000_000), ..EnvoyState::default() };
        Self { state: Rc::new(state) }
    }

    pub fn set_env(&self, name: &str, value: &str) {
        self.state.env.borrow_mut().insert(name.to_string(), value.to_string());
    }

    /// Starts a worker VM under `vm_id` with this plugin configuration; the worker is
    /// there even if its configuration is refused (`Worker::configured` says).
    pub fn start(&self, vm_id: &str, configuration: &[u8]) -> Worker {
        let index = {
            let mut roots = self.state.roots.borrow_mut();
            roots.push(None);
            self.state.ticks.borrow_mut().push((0, 0));
            roots.len() - 1
        };
        let host = Rc::new(FakeHost {
            envoy: Rc::clone(&self.state),
            worker: index,
            vm_id: vm_id.to_string(),
            configuration: configuration.to_vec(),
            memory_bytes: Cell::new(65_536),
        });
        let root = plugin::configure(Rc::clone(&host) as Rc<dyn Host>);
        if let Some(slot) = self.state.roots.borrow_mut().get_mut(index) {
            *slot = root;
        }
        Worker { envoy: Rc::clone(&self.state), index, host }
    }

    pub fn now_ms(&self) -> u64 {
        self.state.clock_ms.get()
    }

    /// Moves the clock; every worker whose tick period elapsed ticks once.
    pub fn advance_ms(&self, ms: u64) {
        let now = self.state.clock_ms.get() + ms;
        self.state.clock_ms.set(now);
        let due: Vec<usize> = {
            let mut ticks = self.state.ticks.borrow_mut();
            let mut due = Vec::new();
            for (index, (period, last)) in ticks.iter_mut().enumerate() {
                if *period > 0 && now >= *last + *period {
                    *last = now;
                    due.push(index);
                }
            }
            due
        };
        for index in due {
            self.with_root(index, |root| root.on_tick());
        }
    }

    /// Wakes the owner of every queue that was enqueued on, as Envoy's dispatcher does
    /// between callbacks; returns how many wake-ups it delivered.
    pub fn deliver(&self) -> usize {
        let mut delivered = 0;
        loop {
            let woken: Vec<(usize, u32)> = {
                let mut queues = self.state.queues.borrow_mut();
                queues
                    .iter_mut()
                    .enumerate()
                    .filter_map(|(i, q)| std::mem::take(&mut q.wake).then(|| (q.owner, queue_id(i))))
                    .collect()
            };
            if woken.is_empty() {
                return delivered;
            }
            for (owner, id) in woken {
                if self.with_root(owner, |root| root.on_queue_ready(id)) {
                    delivered += 1;
                }
            }
        }
    }

    /// Runs `f` on a live worker's root; false if the worker is gone.
    fn with_root(&self, index: usize, f: impl FnOnce(&mut Box<dyn RootEvents>)) -> bool {
        with_root(&self.state, index, f)
    }

    /// Makes every call to the named host method fail until `heal`.
    pub fn fail(&self, call: &'static str) {
        self.state.failing.borrow_mut().insert(call);
    }

    pub fn heal(&self, call: &'static str) {
        self.state.failing.borrow_mut().remove(call);
    }

    /// The host calls every worker made since the last take, by method; each is one
    /// call across the VM boundary in Envoy.
    pub fn take_host_calls(&self) -> BTreeMap<&'static str, u64> {
        std::mem::take(&mut *self.state.calls.borrow_mut())
    }

    /// A counter's or a gauge's value, 0 if never moved.
    pub fn stat(&self, name: &str) -> i64 {
        self.state.stats.borrow().get(name).map_or(0, |s| s.value)
    }

    /// A histogram's samples.
    pub fn samples(&self, name: &str) -> Vec<u64> {
        self.state.stats.borrow().get(name).map(|s| s.samples.clone()).unwrap_or_default()
    }

    pub fn shared_value(&self, key: &str) -> Option<Vec<u8>> {
        self.state.shared.borrow().get(key).map(|(v, _)| v.clone())
    }

    pub fn set_shared_value(&self, key: &str, value: &[u8]) {
        let mut shared = self.state.shared.borrow_mut();
        let cas = shared.get(key).map_or(1, |(_, cas)| cas + 1);
        shared.insert(key.to_string(), (value.to_vec(), cas));
    }

    /// The items waiting in every queue whose name starts with `prefix`, by name.
    pub fn queued(&self, prefix: &str) -> BTreeMap<String, usize> {
        let queues = self.state.queues.borrow();
        queues.iter().filter(|q| q.name.starts_with(prefix)).map(|q| (q.name.clone(), q.items.len())).collect()
    }

    pub fn http_calls(&self) -> Vec<HttpCall> {
        self.state.http_calls.borrow().clone()
    }
}

/// Runs `f` on a live worker's root, with no stream current; false if the worker is
/// gone.
fn with_root(state: &EnvoyState, index: usize, f: impl FnOnce(&mut Box<dyn RootEvents>)) -> bool {
    // Taken out while it runs, so that its host calls can borrow the state.
    let Some(mut root) = state.roots.borrow_mut().get_mut(index).and_then(Option::take) else {
        return false;
    };
    state.current.set(None);
    f(&mut root);
    state.effective.set(None);
    if let Some(slot) = state.roots.borrow_mut().get_mut(index) {
        *slot = Some(root);
    }
    true
}

/// Delivers the answer to an HTTP call, readable while `deliver` runs the callback.
fn with_answer(state: &EnvoyState, answer: Option<(u16, &[u8])>, deliver: impl FnOnce(usize, usize)) {
    let (num_headers, body_size) = answer.map_or((0, 0), |(_, body)| (2, body.len()));
    let answer = answer.map(|(status, body)| CallAnswer {
        headers: vec![
            (":status".to_string(), status.to_string()),
            ("content-type".to_string(), "application/json".to_string()),
        ],
        body: body.to_vec(),
    });
    *state.call_answer.borrow_mut() = Some(answer);
    deliver(num_headers, body_size);
    *state.call_answer.borrow_mut() = None;
}

fn queue_id(index: usize) -> u32 {
    u32::try_from(index + 1).unwrap_or(u32::MAX)
}

/// One worker VM and its root context.
pub struct Worker {
    envoy: Rc<EnvoyState>,
    index: usize,
    pub host: Rc<FakeHost>,
}

impl Worker {
    pub fn configured(&self) -> bool {
        self.envoy.roots.borrow().get(self.index).is_some_and(Option::is_some)
    }

    /// A new stream on this worker's filter chain.
    pub fn stream(&self) -> Stream {
        let id = self.envoy.next_context.get() + 1;
        self.envoy.next_context.set(id);
        let events = match self.envoy.roots.borrow().get(self.index) {
            Some(Some(root)) => root.new_stream(id),
            _ => Box::new(super::events::PassThrough),
        };
        let state = Rc::new(RefCell::new(StreamState::default()));
        self.envoy.streams.borrow_mut().insert(id, Rc::clone(&state));
        Stream {
            id,
            host: Rc::clone(&self.host),
            events,
            shared: state,
            state: StreamState::default(),
            response_flow: None,
        }
    }

    /// Envoy delivers the answer to call `token` that this worker's root callback made
    /// (a tick's): `Some((status, body))`, or `None` for a failed call.
    pub fn answer_call(&self, token: u32, answer: Option<(u16, &[u8])>) {
        assert_caller(&self.envoy, token, Caller::Root(self.index));
        with_answer(&self.envoy, answer, |num_headers, body_size| {
            with_root(&self.envoy, self.index, |root| root.on_http_call_response(token, num_headers, body_size));
        });
    }

    /// The plugin is torn down (a changed config, a new module); its queues stay.
    pub fn tear_down(&self) {
        let root = self.envoy.roots.borrow_mut().get_mut(self.index).and_then(Option::take);
        if let Some(mut root) = root {
            root.on_done();
            self.envoy.effective.set(None);
        }
    }

    /// Sets what `vm_memory_bytes` reports for this VM.
    pub fn set_memory_bytes(&self, bytes: u64) {
        self.host.memory_bytes.set(bytes);
    }

    pub fn tick_period_ms(&self) -> u64 {
        self.envoy.ticks.borrow().get(self.index).map_or(0, |(period, _)| *period)
    }
}

/// Checks that call `token`, if it was made, was dispatched by `caller`: the SDK gives
/// the answer to the context whose callback made the call, and to no other. (A token
/// never dispatched lets a test check that a stray answer is ignored.)
fn assert_caller(state: &EnvoyState, token: u32, caller: Caller) {
    if let Some(call) = state.http_calls.borrow().iter().find(|c| c.token == token) {
        assert_eq!(call.caller, caller, "call {token} was dispatched by {:?}, not {caller:?}", call.caller);
    }
}

/// A local reply the filter sent.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u32,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// What the host knows of one stream.
#[derive(Default, Clone)]
struct StreamState {
    request_headers: Vec<(String, String)>,
    /// The request body Envoy holds for the filter: everything since the last
    /// `Continue`, as Envoy buffers while the filter pauses.
    request_body: Vec<u8>,
    /// The request body passed on upstream so far.
    forwarded_body: Vec<u8>,
    response_headers: Vec<(String, String)>,
    response_chunk: Vec<u8>,
    upstream: Option<String>,
    reply: Option<Reply>,
    /// Inside a response body callback, where Envoy refuses header reads.
    in_response_body: bool,
    /// Resumed: by its own callback from a call answer, or by a root callback.
    resumed: bool,
    /// The stream's own callback resumed its paused response (from a call answer).
    response_resumed: bool,
    /// The whole request went on upstream: Envoy no longer lends its headers (a read
    /// or write is refused, on which the SDK panics).
    request_gone: bool,
}

impl StreamState {
    /// What Envoy holds of the request body goes on upstream.
    fn forward_body(&mut self) {
        let passed = std::mem::take(&mut self.request_body);
        self.forwarded_body.extend_from_slice(&passed);
    }
}

/// One HTTP stream: the test plays Envoy and the upstream around the filter.
pub struct Stream {
    id: u32,
    host: Rc<FakeHost>,
    events: Box<dyn StreamEvents>,
    /// Shared with the process, where root callbacks reach it.
    shared: Rc<RefCell<StreamState>>,
    /// What the test reads: a copy of the shared state, taken after each callback and
    /// at [`Stream::poll`].
    state: StreamState,
    /// What the last response body callback answered.
    response_flow: Option<Flow>,
}

impl Stream {
    /// Runs one callback with this stream current, as Envoy sets the current context.
    fn run<T>(&mut self, callback: impl FnOnce(&mut dyn StreamEvents) -> T) -> T {
        let envoy = &self.host.envoy;
        envoy.effective.set(None);
        envoy.current.set(Some(self.id));
        envoy.count(STREAM_CALLBACK);
        let out = callback(&mut *self.events);
        envoy.current.set(None);
        envoy.effective.set(None);
        self.poll();
        out
    }

    /// Changes the shared state (as the client or the upstream), then the copy.
    fn change(&mut self, f: impl FnOnce(&mut StreamState)) {
        f(&mut self.shared.borrow_mut());
        self.poll();
    }

    /// Sends a request: its headers, then its body in `chunks`. Each callback sees what
    /// Envoy buffered since the filter last continued (everything so far while it
    /// pauses, only the new chunk after a `Continue`). Stops, as Envoy does, once the
    /// filter replied.
    pub fn request(&mut self, method: &str, path: &str, headers: &[(&str, &str)], chunks: &[&[u8]]) -> Flow {
        let flows = self.request_flows(method, path, headers, chunks);
        flows.last().copied().unwrap_or(Flow::Continue)
    }

    /// As [`Stream::request`], with the flow of each callback: the headers', then each
    /// body chunk's until the filter replied.
    pub fn request_flows(&mut self, method: &str, path: &str, headers: &[(&str, &str)], chunks: &[&[u8]]) -> Vec<Flow> {
        let length: usize = chunks.iter().map(|c| c.len()).sum();
        let mut all = vec![(":method".to_string(), method.to_string()), (":path".to_string(), path.to_string())];
        // The body's length, unless the test declares its own (an empty one: none).
        let declares = headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("content-length"));
        if !chunks.is_empty() && !declares {
            all.push(("content-length".to_string(), length.to_string()));
        }
        all.extend(
            headers
                .iter()
                .filter(|(name, value)| !(name.eq_ignore_ascii_case("content-length") && value.is_empty()))
                .map(|(n, v)| (n.to_ascii_lowercase(), v.to_string())),
        );
        self.change(|state| state.request_headers = all);
        let mut flows = vec![self.run(|events| events.on_request_headers(chunks.is_empty()))];
        let gone = chunks.is_empty() && flows.last() == Some(&Flow::Continue);
        self.change(|state| state.request_gone = gone);
        for (i, chunk) in chunks.iter().enumerate() {
            if self.state.reply.is_some() {
                break;
            }
            self.change(|state| state.request_body.extend_from_slice(chunk));
            let buffered = self.state.request_body.len();
            let last = i + 1 == chunks.len();
            let flow = self.run(|events| events.on_request_body(buffered, last));
            if flow == Flow::Continue && self.state.reply.is_none() {
                self.change(|state| {
                    state.forward_body();
                    state.request_gone |= last;
                });
            }
            flows.push(flow);
        }
        flows
    }

    /// The request body bytes that went on upstream.
    pub fn forwarded_body(&self) -> &[u8] {
        &self.state.forwarded_body
    }

    /// A `POST` with a JSON body in one chunk.
    pub fn post_json(&mut self, path: &str, headers: &[(&str, &str)], body: &serde_json::Value) -> Flow {
        let bytes = body.to_string().into_bytes();
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        self.request("POST", path, &all, &[&bytes])
    }

    /// The upstream `upstream` answers: headers with `status` and `content_type`,
    /// then `chunks`. Returns the flow of the last callback.
    pub fn respond(&mut self, upstream: &str, status: u16, content_type: &str, chunks: &[&[u8]]) -> Flow {
        let mut flow = self.respond_headers(upstream, status, content_type, chunks.is_empty());
        for (i, chunk) in chunks.iter().enumerate() {
            flow = self.respond_chunk(chunk, i + 1 == chunks.len());
        }
        flow
    }

    /// Only the response headers, as a stream sends them before its first token.
    pub fn respond_headers(&mut self, upstream: &str, status: u16, content_type: &str, end_of_stream: bool) -> Flow {
        self.change(|state| {
            state.upstream = Some(upstream.to_string());
            state.response_headers = vec![
                (":status".to_string(), status.to_string()),
                ("content-type".to_string(), content_type.to_string()),
            ];
        });
        self.run(|events| events.on_response_headers(end_of_stream))
    }

    /// One response body chunk. After a `Pause`, Envoy buffers: the next callback sees
    /// everything held so far, as one body.
    pub fn respond_chunk(&mut self, chunk: &[u8], end_of_stream: bool) -> Flow {
        let buffering = self.response_flow == Some(Flow::Pause);
        self.change(|state| {
            if !buffering {
                state.response_chunk.clear();
            }
            state.response_chunk.extend_from_slice(chunk);
            state.in_response_body = true;
        });
        let size = self.state.response_chunk.len();
        let flow = self.run(|events| events.on_response_body(size, end_of_stream));
        self.change(|state| state.in_response_body = false);
        self.response_flow = Some(flow);
        flow
    }

    /// Takes in what root callbacks did to this stream since: headers set, a reply, a
    /// resume.
    pub fn poll(&mut self) {
        self.state = self.shared.borrow().clone();
    }

    /// A root callback, or the stream's own call answer, let the paused request go on.
    pub fn resumed(&mut self) -> bool {
        self.poll();
        self.state.resumed
    }

    /// Envoy delivers the answer to call `token` that this stream's callback made:
    /// `Some((status, body))`, or `None` for a failed call (reset, no upstream). A
    /// resume from the callback sends the buffered body on upstream.
    pub fn answer_call(&mut self, token: u32, answer: Option<(u16, &[u8])>) {
        assert_caller(&self.host.envoy, token, Caller::Stream(self.id));
        let envoy = Rc::clone(&self.host.envoy);
        with_answer(&envoy, answer, |num_headers, body_size| {
            self.run(|events| events.on_http_call_response(token, num_headers, body_size));
        });
        if self.state.resumed && self.state.reply.is_none() {
            self.change(|state| {
                state.forward_body();
                state.request_gone = true;
            });
        }
    }

    /// The stream ends (answered, reset or timed out): Envoy forgets its context.
    pub fn end(&mut self) {
        self.run(|events| events.on_log());
        self.host.envoy.streams.borrow_mut().remove(&self.id);
    }

    pub fn reply(&self) -> Option<&Reply> {
        self.state.reply.as_ref()
    }

    /// A call answer let the paused response go on.
    pub fn response_resumed(&self) -> bool {
        self.state.response_resumed
    }

    /// A request header as the filter left it.
    pub fn request_header(&self, name: &str) -> Option<&str> {
        self.state.request_headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn response_header(&self, name: &str) -> Option<&str> {
        self.state.response_headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// One worker VM's view of the host.
pub struct FakeHost {
    envoy: Rc<EnvoyState>,
    worker: usize,
    vm_id: String,
    configuration: Vec<u8>,
    memory_bytes: Cell<u64>,
}

impl FakeHost {
    /// The stream host calls act on.
    fn stream(&self) -> Rc<RefCell<StreamState>> {
        self.envoy.stream()
    }
}

fn set_header(headers: &mut Vec<(String, String)>, name: &str, value: Option<&str>) {
    headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    if let Some(value) = value {
        headers.push((name.to_ascii_lowercase(), value.to_string()));
    }
}

fn header(headers: &[(String, String)], name: &str) -> Option<Vec<u8>> {
    headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone().into_bytes())
}

fn range(bytes: &[u8], start: usize, size: usize) -> Option<Vec<u8>> {
    let end = start.saturating_add(size).min(bytes.len());
    bytes.get(start..end).map(<[u8]>::to_vec)
}

impl Host for FakeHost {
    fn plugin_configuration(&self) -> Option<Vec<u8>> {
        self.envoy.count("plugin_configuration");
        (!self.envoy.fails("plugin_configuration")).then(|| self.configuration.clone())
    }

    fn env_var(&self, name: &str) -> Option<String> {
        self.envoy.count("env_var");
        self.envoy.env.borrow().get(name).cloned()
    }

    fn now_unix_ms(&self) -> u64 {
        self.envoy.count("now_unix_ms");
        self.envoy.clock_ms.get()
    }

    fn set_tick_period_ms(&self, period_ms: u64) -> Result<(), Status> {
        self.envoy.count("set_tick_period_ms");
        if self.envoy.fails("set_tick_period_ms") {
            return Err(Status::InternalFailure);
        }
        if let Some(tick) = self.envoy.ticks.borrow_mut().get_mut(self.worker) {
            *tick = (period_ms, self.envoy.clock_ms.get());
        }
        Ok(())
    }

    fn vm_memory_bytes(&self) -> u64 {
        self.envoy.count("vm_memory_bytes");
        self.memory_bytes.get()
    }

    fn request_headers(&self) -> Vec<(String, Vec<u8>)> {
        self.envoy.count("request_headers");
        let stream = self.stream();
        let stream = stream.borrow();
        assert!(!stream.request_gone, "request headers read after the request went on");
        stream.request_headers.iter().map(|(n, v)| (n.clone(), v.clone().into_bytes())).collect()
    }

    fn request_header(&self, name: &str) -> Option<Vec<u8>> {
        self.envoy.count("request_header");
        let stream = self.stream();
        let stream = stream.borrow();
        assert!(!stream.request_gone, "request header {name:?} read after the request went on");
        header(&stream.request_headers, name)
    }

    fn set_request_header(&self, name: &str, value: Option<&str>) -> Result<(), Status> {
        self.envoy.count("set_request_header");
        if self.envoy.fails("set_request_header") {
            return Err(Status::BadArgument);
        }
        let stream = self.stream();
        let mut stream = stream.borrow_mut();
        assert!(!stream.request_gone, "request header {name:?} set after the request went on");
        set_header(&mut stream.request_headers, name, value);
        Ok(())
    }

    fn request_body(&self, start: usize, size: usize) -> Option<Vec<u8>> {
        self.envoy.count("request_body");
        if self.envoy.fails("request_body") {
            return None;
        }
        range(&self.stream().borrow().request_body, start, size)
    }

    fn set_request_body(&self, size: usize, body: &[u8]) -> Result<(), Status> {
        self.envoy.count("set_request_body");
        if self.envoy.fails("set_request_body") {
            return Err(Status::NotFound);
        }
        let stream = self.stream();
        let mut stream = stream.borrow_mut();
        let held = size.min(stream.request_body.len());
        let kept = stream.request_body.split_off(held);
        stream.request_body = [body, &kept].concat();
        Ok(())
    }

    fn response_header(&self, name: &str) -> Option<Vec<u8>> {
        self.envoy.count("response_header");
        let stream = self.stream();
        let stream = stream.borrow();
        // Envoy answers a header read in a body callback with an error status, on which
        // the SDK panics: the VM would crash and every stream on it be reset.
        assert!(!stream.in_response_body, "response header {name:?} read in a response body callback");
        header(&stream.response_headers, name)
    }

    fn set_response_header(&self, name: &str, value: &str) -> Result<(), Status> {
        self.envoy.count("set_response_header");
        set_header(&mut self.stream().borrow_mut().response_headers, name, Some(value));
        Ok(())
    }

    fn response_body(&self, start: usize, size: usize) -> Option<Vec<u8>> {
        self.envoy.count("response_body");
        range(&self.stream().borrow().response_chunk, start, size)
    }

    fn upstream_address(&self) -> Option<String> {
        self.envoy.count("upstream_address");
        self.stream().borrow().upstream.clone()
    }

    fn send_reply(&self, status: u32, headers: &[(&str, &str)], body: &[u8]) -> Result<(), Status> {
        self.envoy.count("send_reply");
        if self.envoy.fails("send_reply") {
            return Err(Status::InternalFailure);
        }
        let headers = headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        self.stream().borrow_mut().reply = Some(Reply { status, headers, body: body.to_vec() });
        Ok(())
    }

    fn set_effective_context(&self, context_id: u32) -> Result<(), Status> {
        self.envoy.count("set_effective_context");
        if self.envoy.fails("set_effective_context") || !self.envoy.streams.borrow().contains_key(&context_id) {
            return Err(Status::BadArgument);
        }
        self.envoy.effective.set(Some(context_id));
        Ok(())
    }

    fn resume_request(&self) -> Result<(), Status> {
        self.envoy.count("resume_request");
        if self.envoy.fails("resume_request") {
            return Err(Status::BadArgument);
        }
        let stream = self.stream();
        let mut stream = stream.borrow_mut();
        if self.envoy.effective.get().is_some() {
            // A root callback resumes a held stream: its body goes on at once.
            stream.resumed = true;
            stream.request_gone = true;
            if stream.reply.is_none() {
                stream.forward_body();
            }
            return Ok(());
        }
        // A stream resumes itself from a call answer; in a request callback, Envoy
        // resumes it only by the callback's return value.
        if self.envoy.call_answer.borrow().is_none() {
            return Err(Status::BadArgument);
        }
        stream.resumed = true;
        Ok(())
    }

    fn resume_response(&self) -> Result<(), Status> {
        self.envoy.count("resume_response");
        // Only from a call answer: a response callback resumes by its return value.
        if self.envoy.fails("resume_response") || self.envoy.call_answer.borrow().is_none() {
            return Err(Status::BadArgument);
        }
        self.stream().borrow_mut().response_resumed = true;
        Ok(())
    }

    fn shared_data(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        self.envoy.count("shared_data");
        match self.envoy.shared.borrow().get(key) {
            Some((value, cas)) => (Some(value.clone()), Some(*cas)),
            None => (None, None),
        }
    }

    fn set_shared_data(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), Status> {
        self.envoy.count("set_shared_data");
        if self.envoy.fails("set_shared_data") {
            return Err(Status::InternalFailure);
        }
        let mut shared = self.envoy.shared.borrow_mut();
        let current = shared.get(key).map(|(_, c)| *c);
        if cas.is_some() && cas != current {
            return Err(Status::CasMismatch);
        }
        shared.insert(key.to_string(), (value.to_vec(), current.map_or(1, |c| c + 1)));
        Ok(())
    }

    fn register_queue(&self, name: &str) -> Result<u32, Status> {
        self.envoy.count("register_queue");
        if self.envoy.fails("register_queue") {
            return Err(Status::InternalFailure);
        }
        let mut queues = self.envoy.queues.borrow_mut();
        if let Some((index, queue)) =
            queues.iter_mut().enumerate().find(|(_, q)| q.vm_id == self.vm_id && q.name == name)
        {
            queue.owner = self.worker;
            return Ok(queue_id(index));
        }
        queues.push(Queue {
            vm_id: self.vm_id.clone(),
            name: name.to_string(),
            owner: self.worker,
            items: VecDeque::new(),
            wake: false,
        });
        Ok(queue_id(queues.len() - 1))
    }

    fn resolve_queue(&self, vm_id: &str, name: &str) -> Option<u32> {
        self.envoy.count("resolve_queue");
        let queues = self.envoy.queues.borrow();
        queues.iter().position(|q| q.vm_id == vm_id && q.name == name).map(queue_id)
    }

    fn enqueue(&self, queue: u32, value: &[u8]) -> Result<(), Status> {
        self.envoy.count("enqueue");
        if self.envoy.fails("enqueue") {
            return Err(Status::InternalFailure);
        }
        let mut queues = self.envoy.queues.borrow_mut();
        let queue = (queue as usize).checked_sub(1).and_then(|i| queues.get_mut(i)).ok_or(Status::NotFound)?;
        queue.items.push_back(value.to_vec());
        queue.wake = true;
        Ok(())
    }

    fn dequeue(&self, queue: u32) -> Option<Vec<u8>> {
        self.envoy.count("dequeue");
        self.envoy.queues.borrow_mut().get_mut((queue as usize).checked_sub(1)?)?.items.pop_front()
    }

    fn dispatch_http_call(
        &self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Result<u32, Status> {
        self.envoy.count("dispatch_http_call");
        if self.envoy.fails("dispatch_http_call") {
            return Err(Status::BadArgument);
        }
        let mut calls = self.envoy.http_calls.borrow_mut();
        let token = u32::try_from(calls.len() + 1).unwrap_or(u32::MAX);
        calls.push(HttpCall {
            cluster: cluster.to_string(),
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
            body: body.to_vec(),
            timeout_ms,
            token,
            caller: match self.envoy.current.get() {
                Some(id) => Caller::Stream(id),
                None => Caller::Root(self.worker),
            },
        });
        Ok(token)
    }

    fn http_call_response_header(&self, name: &str) -> Option<Vec<u8>> {
        self.envoy.count("http_call_response_header");
        let answer = self.envoy.call_answer.borrow();
        // Envoy refuses a header read outside a call answer, or of a failed call's
        // (BadArgument), on which the SDK panics.
        let Some(Some(answer)) = answer.as_ref() else {
            panic!("call answer header {name:?} read without an answer's headers");
        };
        header(&answer.headers, name)
    }

    fn http_call_response_body(&self, start: usize, size: usize) -> Option<Vec<u8>> {
        self.envoy.count("http_call_response_body");
        let answer = self.envoy.call_answer.borrow();
        range(&answer.as_ref()?.as_ref()?.body, start, size)
    }

    fn define_metric(&self, _kind: MetricKind, name: &str) -> Result<u32, Status> {
        self.envoy.count("define_metric");
        if self.envoy.fails("define_metric") {
            return Err(Status::InternalFailure);
        }
        let mut names = self.envoy.metric_names.borrow_mut();
        names.push(name.to_string());
        self.envoy.stats.borrow_mut().entry(name.to_string()).or_default();
        Ok(u32::try_from(names.len() - 1).unwrap_or(u32::MAX))
    }

    fn increment_metric(&self, id: u32, delta: i64) -> Result<(), Status> {
        self.envoy.count("increment_metric");
        let name = self.envoy.metric_names.borrow().get(id as usize).cloned().ok_or(Status::NotFound)?;
        self.envoy.stats.borrow_mut().entry(name).or_default().value += delta;
        Ok(())
    }

    fn record_metric(&self, id: u32, value: u64) -> Result<(), Status> {
        self.envoy.count("record_metric");
        let name = self.envoy.metric_names.borrow().get(id as usize).cloned().ok_or(Status::NotFound)?;
        let mut stats = self.envoy.stats.borrow_mut();
        let stat = stats.entry(name).or_default();
        stat.value = i64::try_from(value).unwrap_or(i64::MAX);
        stat.samples.push(value);
        Ok(())
    }
}

thread_local! {
    static LOGS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Collects log lines per test thread.
struct CapturedLogs;

impl log::Log for CapturedLogs {
    fn enabled(&self, _metadata: &log::Metadata) -> bool {
        true
    }

    fn log(&self, record: &log::Record) {
        LOGS.with(|logs| logs.borrow_mut().push(format!("{} {}", record.level(), record.args())));
    }

    fn flush(&self) {}
}

fn capture_logs() {
    static LOGGER: CapturedLogs = CapturedLogs;
    // Only the first test to start installs it; the others find it there.
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Debug);
}

/// The log lines this test thread wrote since the last call.
pub fn take_logs() -> Vec<String> {
    LOGS.with(|logs| std::mem::take(&mut *logs.borrow_mut()))
}
