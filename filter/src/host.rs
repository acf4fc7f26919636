//! The host calls the filter uses, each returning a `Result` or an `Option`. The SDK's
//! trait methods unwrap host errors, which would panic and kill the VM, so the filter
//! calls these instead and turns every failure into a log line and a fallback.

use std::time::UNIX_EPOCH;

use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType, Status};

/// A request header as text; invalid UTF-8 reads as absent.
pub fn request_header(name: &str) -> Option<String> {
    hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, name)
        .ok()
        .flatten()
        .and_then(|bytes| String::from_utf8(bytes).ok())
}

/// Every request header, in one host call (Envoy gives their names in lower case).
pub fn request_headers() -> Vec<(String, Vec<u8>)> {
    hostcalls::get_map_bytes(MapType::HttpRequestHeaders).unwrap_or_default()
}

pub fn set_request_header(name: &str, value: Option<&str>) -> Result<(), Status> {
    hostcalls::set_map_value_bytes(MapType::HttpRequestHeaders, name, value.map(str::as_bytes))
}

pub fn set_response_header(name: &str, value: &str) -> Result<(), Status> {
    hostcalls::set_map_value_bytes(MapType::HttpResponseHeaders, name, Some(value.as_bytes()))
}

/// `size` bytes of the buffered request body from `start`.
pub fn request_body_range(start: usize, size: usize) -> Option<Vec<u8>> {
    hostcalls::get_buffer(BufferType::HttpRequestBody, start, size).ok().flatten()
}

pub fn plugin_configuration() -> Option<Vec<u8>> {
    hostcalls::get_buffer(BufferType::PluginConfiguration, 0, usize::MAX).ok().flatten()
}

/// Sends a local reply. If the host refuses, there is nothing better to do than log:
/// the stream is already paused and Envoy will time it out.
pub fn reply(status: u32, headers: Vec<(&str, &str)>, body: &[u8]) {
    if let Err(status_err) = hostcalls::send_http_response(status, headers, Some(body)) {
        log::error!("could not send a {status} reply: {status_err:?}");
    }
}

/// Wakes this worker's root context every `period_ms` (0 stops it).
pub fn set_tick_period_ms(period_ms: u64) {
    if let Err(status) = hostcalls::set_tick_period(std::time::Duration::from_millis(period_ms)) {
        log::warn!("cannot set the tick period to {period_ms} ms: {status:?}");
    }
}

pub fn now_unix_ms() -> u64 {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub fn shared_data(key: &str) -> Option<Vec<u8>> {
    hostcalls::get_shared_data(key).ok().and_then(|(value, _cas)| value)
}

pub fn set_shared_data(key: &str, value: &[u8]) -> Result<(), Status> {
    hostcalls::set_shared_data(key, Some(value), None)
}

/// A value with its compare-and-swap token; `(None, None)` if the key was never set.
pub fn shared_data_with_cas(key: &str) -> (Option<Vec<u8>>, Option<u32>) {
    hostcalls::get_shared_data(key).unwrap_or((None, None))
}

/// Writes only if nobody wrote since `cas` was read (`None`: unconditionally).
fn set_shared_data_cas(key: &str, value: &[u8], cas: Option<u32>) -> Result<(), Status> {
    hostcalls::set_shared_data(key, Some(value), cas)
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

/// Rewrites a shared-data value from its current one, with compare-and-swap, because
/// every worker may write it: `change` gets the current value (`None` if never set) and
/// returns the new one, or declines. Retried when another worker wrote in between.
pub fn update_shared_data<V: AsRef<[u8]>, T>(
    key: &str,
    mut change: impl FnMut(Option<&[u8]>) -> Result<V, T>,
) -> Result<(), UpdateError<T>> {
    for _ in 0..CAS_ATTEMPTS {
        let (current, cas) = shared_data_with_cas(key);
        let next = change(current.as_deref()).map_err(UpdateError::Declined)?;
        match set_shared_data_cas(key, next.as_ref(), cas) {
            Ok(()) => return Ok(()),
            Err(Status::CasMismatch) => continue,
            Err(status) => return Err(UpdateError::Host(status)),
        }
    }
    Err(UpdateError::Contended)
}

/// The address of the upstream host that served the request, `ip:port`.
pub fn upstream_address() -> Option<String> {
    hostcalls::get_property(vec!["upstream", "address"]).ok().flatten().and_then(|bytes| String::from_utf8(bytes).ok())
}

/// A response header as text; invalid UTF-8 reads as absent.
pub fn response_header(name: &str) -> Option<String> {
    hostcalls::get_map_value_bytes(MapType::HttpResponseHeaders, name)
        .ok()
        .flatten()
        .and_then(|bytes| String::from_utf8(bytes).ok())
}

pub fn response_status() -> Option<u16> {
    hostcalls::get_map_value_bytes(MapType::HttpResponseHeaders, ":status")
        .ok()
        .flatten()
        .and_then(|bytes| std::str::from_utf8(&bytes).ok().and_then(|s| s.parse().ok()))
}

pub fn register_queue(name: &str) -> Result<u32, Status> {
    hostcalls::register_shared_queue(name)
}

pub fn resolve_queue(vm_id: &str, name: &str) -> Option<u32> {
    hostcalls::resolve_shared_queue(vm_id, name).ok().flatten()
}

pub fn enqueue(queue_id: u32, value: &[u8]) -> Result<(), Status> {
    hostcalls::enqueue_shared_queue(queue_id, Some(value))
}

pub fn dequeue(queue_id: u32) -> Option<Vec<u8>> {
    hostcalls::dequeue_shared_queue(queue_id).ok().flatten()
}

/// An HTTP call from the root context to `cluster`; the answer is not awaited.
pub fn dispatch_post(cluster: &str, path: &str, headers: Vec<(&str, &str)>, body: &[u8]) -> Result<u32, Status> {
    let mut all = vec![(":method", "POST"), (":path", path), (":authority", cluster)];
    all.extend(headers);
    hostcalls::dispatch_http_call(cluster, all, Some(body), vec![], std::time::Duration::from_secs(2))
}

pub fn response_body(size: usize) -> Option<Vec<u8>> {
    hostcalls::get_buffer(proxy_wasm::types::BufferType::HttpResponseBody, 0, size).ok().flatten()
}
