//! Everything the filter asks of its host, behind one trait.
//!
//! The roles never call the proxy-wasm SDK: they hold an `Rc<dyn Host>` and get their
//! callbacks through `events`. `sdk` is the only code that touches the SDK (a test
//! checks it); `fake`, in tests, is an Envoy of several workers in one process.
//!
//! Every call returns a `Result` or an `Option`: the SDK's own trait methods unwrap
//! host errors, which would panic and kill the VM, so a failure here becomes a log
//! line and a fallback in the caller.

pub mod events;
#[cfg(test)]
pub mod fake;
pub mod sdk;

/// Why the host refused a call; the names are the proxy-wasm ABI's statuses, so log
/// lines read as the host's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    NotFound,
    BadArgument,
    SerializationFailure,
    ParseFailure,
    Empty,
    CasMismatch,
    InternalFailure,
}

/// The three kinds of Envoy stats a plugin can define.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

/// The host calls, grouped as Envoy groups them. Calls about "the request" or "the
/// response" act on the stream whose callback is running.
pub trait Host {
    // The plugin and its VM.
    fn plugin_configuration(&self) -> Option<Vec<u8>>;
    /// An environment variable the VM was given (`vm_config.environment_variables`).
    fn env_var(&self, name: &str) -> Option<String>;
    fn now_unix_ms(&self) -> u64;
    /// Wakes this VM's root context every `period_ms` (0 stops it).
    fn set_tick_period_ms(&self, period_ms: u64) -> Result<(), Status>;
    /// The VM's linear memory, which only grows.
    fn vm_memory_bytes(&self) -> u64;

    // The current stream.
    /// Every request header, in one call (Envoy gives their names in lower case).
    fn request_headers(&self) -> Vec<(String, Vec<u8>)>;
    fn request_header(&self, name: &str) -> Option<Vec<u8>>;
    /// Sets (`Some`) or removes (`None`) a request header.
    fn set_request_header(&self, name: &str, value: Option<&str>) -> Result<(), Status>;
    /// `size` bytes of the buffered request body from `start`.
    fn request_body(&self, start: usize, size: usize) -> Option<Vec<u8>>;
    /// Replaces the first `size` bytes of the buffered request body (all of it, when
    /// `size` is its length) with `body`.
    fn set_request_body(&self, size: usize, body: &[u8]) -> Result<(), Status>;
    fn response_header(&self, name: &str) -> Option<Vec<u8>>;
    fn set_response_header(&self, name: &str, value: &str) -> Result<(), Status>;
    /// `size` bytes of the response body chunk from `start`.
    fn response_body(&self, start: usize, size: usize) -> Option<Vec<u8>>;
    /// The address of the upstream host that serves the stream, `ip:port`.
    fn upstream_address(&self) -> Option<String>;
    /// Answers the client and ends the stream.
    fn send_reply(&self, status: u32, headers: &[(&str, &str)], body: &[u8]) -> Result<(), Status>;
    /// From a root callback: the stream calls that follow act on stream `context_id`
    /// (one the gateway queue holds), until the callback returns.
    fn set_effective_context(&self, context_id: u32) -> Result<(), Status>;
    /// Lets the effective stream's paused request go on to the next filter.
    fn resume_request(&self) -> Result<(), Status>;
    /// Lets the effective stream's paused response go on to the next filter.
    fn resume_response(&self) -> Result<(), Status>;

    // Shared between the VMs of one process.
    /// A value with its compare-and-swap token; `(None, None)` if never set.
    fn shared_data(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>);
    /// Writes only if nobody wrote since `cas` was read (`None`: unconditionally).
    fn set_shared_data(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), Status>;
    /// Registers a queue under this VM's `vm_id`; an enqueue on it wakes this root.
    fn register_queue(&self, name: &str) -> Result<u32, Status>;
    fn resolve_queue(&self, vm_id: &str, name: &str) -> Option<u32>;
    fn enqueue(&self, queue: u32, value: &[u8]) -> Result<(), Status>;
    fn dequeue(&self, queue: u32) -> Option<Vec<u8>>;

    // Out of the process.
    /// An HTTP call, made by Envoy for the root context. Its answer goes to the context
    /// whose callback made the call: a stream's `on_http_call_response` (the call
    /// outlives the stream; an answer after the stream ended goes nowhere), or nowhere
    /// for a root's.
    fn dispatch_http_call(
        &self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Result<u32, Status>;
    /// A header of the call answer being delivered. Only an answer with headers has
    /// them: a failed call (reset, no upstream) has none, and Envoy refuses the read.
    fn http_call_response_header(&self, name: &str) -> Option<Vec<u8>>;
    /// `size` bytes of the call answer being delivered, from `start`.
    fn http_call_response_body(&self, start: usize, size: usize) -> Option<Vec<u8>>;

    // Envoy's stats.
    fn define_metric(&self, kind: MetricKind, name: &str) -> Result<u32, Status>;
    /// Adds `delta` to a counter or a gauge.
    fn increment_metric(&self, id: u32, delta: i64) -> Result<(), Status>;
    /// Sets a gauge, or records a histogram sample.
    fn record_metric(&self, id: u32, value: u64) -> Result<(), Status>;
}

/// Compare-and-swap retries before an update gives up: the contention is between a
/// few workers.
const CAS_ATTEMPTS: usize = 16;

/// Why a shared-data update did not write.
#[derive(Debug)]
pub enum UpdateError<T> {
    /// `change` declined, with its reason.
    Declined(T),
    /// Other workers wrote in between every attempt.
    Contended,
    Host(Status),
}

/// What the roles build on the raw calls.
impl dyn Host + '_ {
    /// A request header as text; invalid UTF-8 reads as absent.
    pub fn request_header_text(&self, name: &str) -> Option<String> {
        self.request_header(name).and_then(|bytes| String::from_utf8(bytes).ok())
    }

    /// A response header as text; invalid UTF-8 reads as absent.
    pub fn response_header_text(&self, name: &str) -> Option<String> {
        self.response_header(name).and_then(|bytes| String::from_utf8(bytes).ok())
    }

    pub fn response_status(&self) -> Option<u16> {
        self.response_header(":status").and_then(|bytes| std::str::from_utf8(&bytes).ok()?.parse().ok())
    }

    /// A shared-data value without its token.
    pub fn shared_value(&self, key: &str) -> Option<Vec<u8>> {
        self.shared_data(key).0
    }

    /// Sends a local reply. If the host refuses, there is nothing better to do than
    /// log: the stream is already paused and Envoy will time it out.
    pub fn reply(&self, status: u32, headers: &[(&str, &str)], body: &[u8]) {
        if let Err(refused) = self.send_reply(status, headers, body) {
            log::error!("could not send a {status} reply: {refused:?}");
        }
    }

    /// Sets the tick period, logging a refusal.
    pub fn tick_every_ms(&self, period_ms: u64) {
        if let Err(status) = self.set_tick_period_ms(period_ms) {
            log::warn!("cannot set the tick period to {period_ms} ms: {status:?}");
        }
    }

    /// Rewrites a shared-data value from its current one, with compare-and-swap,
    /// because every worker may write it: `change` gets the current value (`None` if
    /// never set) and returns the new one, or declines. Retried when another worker
    /// wrote in between.
    pub fn update_shared_data<V: AsRef<[u8]>, T>(
        &self,
        key: &str,
        mut change: impl FnMut(Option<&[u8]>) -> Result<V, T>,
    ) -> Result<(), UpdateError<T>> {
        for _ in 0..CAS_ATTEMPTS {
            let (current, cas) = self.shared_data(key);
            let next = change(current.as_deref()).map_err(UpdateError::Declined)?;
            match self.set_shared_data(key, next.as_ref(), cas) {
                Ok(()) => return Ok(()),
                Err(Status::CasMismatch) => continue,
                Err(status) => return Err(UpdateError::Host(status)),
            }
        }
        Err(UpdateError::Contended)
    }

    /// A POST from the root context to `cluster`; the answer is not awaited.
    pub fn post(&self, cluster: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<u32, Status> {
        let mut all = vec![(":method", "POST"), (":path", path), (":authority", cluster)];
        all.extend_from_slice(headers);
        self.dispatch_http_call(cluster, &all, body, POST_TIMEOUT_MS)
    }
}

/// How long a root context's POST may take.
const POST_TIMEOUT_MS: u64 = 2_000;

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every `.rs` file under `dir`, with its path.
    fn sources(dir: &Path, found: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                found.push((path.display().to_string(), text));
            }
        }
    }

    /// The SDK's calls unwrap host errors (a panic kills the VM), and a host call made
    /// around `Host` is one the fake cannot see: only `host/sdk.rs` may name the SDK.
    #[test]
    fn only_the_sdk_module_names_the_sdk() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = Vec::new();
        sources(&root, &mut found);
        assert!(found.len() > 10, "read the sources: {}", found.len());
        // Spelled in two halves so that this file does not match itself.
        let needles = [concat!("proxy", "_wasm"), concat!("host", "calls")];
        let offenders: Vec<&str> = found
            .iter()
            .filter(|(path, _)| !path.ends_with("host/sdk.rs"))
            .filter(|(_, text)| needles.iter().any(|n| text.contains(n)))
            .map(|(path, _)| path.as_str())
            .collect();
        assert!(offenders.is_empty(), "only host/sdk.rs may call the SDK: {offenders:?}");
    }
}
