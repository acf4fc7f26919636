//! The only code that calls the proxy-wasm SDK: `SdkHost` makes the host calls, and
//! the adapters forward the SDK's callbacks to the roles' `events`. `main!` is the
//! module's entry point.

use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, BufferType, ContextType, LogLevel, MapType, MetricType};

use super::events::{Flow, RootEvents, StreamEvents};
use super::{Host, MetricKind, Status};
use crate::plugin;

/// The host calls, made through the SDK's `hostcalls`, which return errors rather
/// than panic.
pub struct SdkHost;

fn status(sdk: proxy_wasm::types::Status) -> Status {
    use proxy_wasm::types::Status as Sdk;
    match sdk {
        Sdk::NotFound => Status::NotFound,
        Sdk::BadArgument => Status::BadArgument,
        Sdk::SerializationFailure => Status::SerializationFailure,
        Sdk::ParseFailure => Status::ParseFailure,
        Sdk::Empty => Status::Empty,
        Sdk::CasMismatch => Status::CasMismatch,
        _ => Status::InternalFailure,
    }
}

impl Host for SdkHost {
    fn plugin_configuration(&self) -> Option<Vec<u8>> {
        hostcalls::get_buffer(BufferType::PluginConfiguration, 0, usize::MAX).ok().flatten()
    }

    fn env_var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn now_unix_ms(&self) -> u64 {
        hostcalls::get_current_time()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    fn set_tick_period_ms(&self, period_ms: u64) -> Result<(), Status> {
        hostcalls::set_tick_period(Duration::from_millis(period_ms)).map_err(status)
    }

    fn vm_memory_bytes(&self) -> u64 {
        #[cfg(target_arch = "wasm32")]
        {
            (core::arch::wasm32::memory_size(0) as u64).saturating_mul(65_536)
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            0
        }
    }

    fn request_headers(&self) -> Vec<(String, Vec<u8>)> {
        hostcalls::get_map_bytes(MapType::HttpRequestHeaders).unwrap_or_default()
    }

    fn request_header(&self, name: &str) -> Option<Vec<u8>> {
        hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, name).ok().flatten()
    }

    fn set_request_header(&self, name: &str, value: Option<&str>) -> Result<(), Status> {
        hostcalls::set_map_value_bytes(MapType::HttpRequestHeaders, name, value.map(str::as_bytes)).map_err(status)
    }

    fn request_body(&self, start: usize, size: usize) -> Option<Vec<u8>> {
        hostcalls::get_buffer(BufferType::HttpRequestBody, start, size).ok().flatten()
    }

    fn set_request_body(&self, size: usize, body: &[u8]) -> Result<(), Status> {
        raw::set_buffer_bytes(BufferType::HttpRequestBody, size, body)
    }

    fn response_header(&self, name: &str) -> Option<Vec<u8>> {
        hostcalls::get_map_value_bytes(MapType::HttpResponseHeaders, name).ok().flatten()
    }

    fn set_response_header(&self, name: &str, value: &str) -> Result<(), Status> {
        hostcalls::set_map_value_bytes(MapType::HttpResponseHeaders, name, Some(value.as_bytes())).map_err(status)
    }

    fn response_body(&self, start: usize, size: usize) -> Option<Vec<u8>> {
        hostcalls::get_buffer(BufferType::HttpResponseBody, start, size).ok().flatten()
    }

    fn upstream_address(&self) -> Option<String> {
        let bytes = hostcalls::get_property(vec!["upstream", "address"]).ok().flatten()?;
        String::from_utf8(bytes).ok()
    }

    fn send_reply(&self, status_code: u32, headers: &[(&str, &str)], body: &[u8]) -> Result<(), Status> {
        hostcalls::send_http_response(status_code, headers.to_vec(), Some(body)).map_err(status)
    }

    fn set_effective_context(&self, context_id: u32) -> Result<(), Status> {
        hostcalls::set_effective_context(context_id).map_err(status)
    }

    fn resume_request(&self) -> Result<(), Status> {
        hostcalls::resume_http_request().map_err(status)
    }

    fn resume_response(&self) -> Result<(), Status> {
        hostcalls::resume_http_response().map_err(status)
    }

    fn shared_data(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        hostcalls::get_shared_data(key).unwrap_or((None, None))
    }

    fn set_shared_data(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), Status> {
        hostcalls::set_shared_data(key, Some(value), cas).map_err(status)
    }

    fn register_queue(&self, name: &str) -> Result<u32, Status> {
        hostcalls::register_shared_queue(name).map_err(status)
    }

    fn resolve_queue(&self, vm_id: &str, name: &str) -> Option<u32> {
        hostcalls::resolve_shared_queue(vm_id, name).ok().flatten()
    }

    fn enqueue(&self, queue: u32, value: &[u8]) -> Result<(), Status> {
        hostcalls::enqueue_shared_queue(queue, Some(value)).map_err(status)
    }

    fn dequeue(&self, queue: u32) -> Option<Vec<u8>> {
        hostcalls::dequeue_shared_queue(queue).ok().flatten()
    }

    fn dispatch_http_call(
        &self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Result<u32, Status> {
        hostcalls::dispatch_http_call(cluster, headers.to_vec(), Some(body), vec![], Duration::from_millis(timeout_ms))
            .map_err(status)
    }

    fn http_call_response_header(&self, name: &str) -> Option<Vec<u8>> {
        hostcalls::get_map_value_bytes(MapType::HttpCallResponseHeaders, name).ok().flatten()
    }

    fn http_call_response_body(&self, start: usize, size: usize) -> Option<Vec<u8>> {
        hostcalls::get_buffer(BufferType::HttpCallResponseBody, start, size).ok().flatten()
    }

    fn define_metric(&self, kind: MetricKind, name: &str) -> Result<u32, Status> {
        let kind = match kind {
            MetricKind::Counter => MetricType::Counter,
            MetricKind::Gauge => MetricType::Gauge,
            MetricKind::Histogram => MetricType::Histogram,
        };
        hostcalls::define_metric(kind, name).map_err(status)
    }

    fn increment_metric(&self, id: u32, delta: i64) -> Result<(), Status> {
        hostcalls::increment_metric(id, delta).map_err(status)
    }

    fn record_metric(&self, id: u32, value: u64) -> Result<(), Status> {
        hostcalls::record_metric(id, value).map_err(status)
    }
}

fn action(flow: Flow) -> Action {
    match flow {
        Flow::Continue => Action::Continue,
        Flow::Pause => Action::Pause,
    }
}

/// The SDK's root context: configured once into one role.
#[derive(Default)]
struct SdkRoot {
    role: Option<Box<dyn RootEvents>>,
}

impl Context for SdkRoot {
    fn on_done(&mut self) -> bool {
        if let Some(role) = self.role.as_mut() {
            role.on_done();
        }
        true
    }

    fn on_http_call_response(&mut self, token_id: u32, num_headers: usize, body_size: usize, _num_trailers: usize) {
        if let Some(role) = self.role.as_mut() {
            role.on_http_call_response(token_id, num_headers, body_size);
        }
    }
}

impl RootContext for SdkRoot {
    fn on_configure(&mut self, _size: usize) -> bool {
        self.role = plugin::configure(Rc::new(SdkHost));
        self.role.is_some()
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        if let Some(role) = self.role.as_mut() {
            role.on_queue_ready(queue_id);
        }
    }

    fn on_tick(&mut self) {
        if let Some(role) = self.role.as_mut() {
            role.on_tick();
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        // The SDK panics on `None`, so an unconfigured root answers with a stream that
        // does nothing.
        let stream = match &self.role {
            Some(role) => role.new_stream(context_id),
            None => Box::new(super::events::PassThrough),
        };
        Some(Box::new(SdkStream(stream)))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// The SDK's HTTP context over a role's stream.
struct SdkStream(Box<dyn StreamEvents>);

impl HttpContext for SdkStream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        action(self.0.on_request_headers(end_of_stream))
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        action(self.0.on_request_body(body_size, end_of_stream))
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        action(self.0.on_response_headers(end_of_stream))
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        action(self.0.on_response_body(body_size, end_of_stream))
    }

    fn on_log(&mut self) {
        self.0.on_log();
    }
}

impl Context for SdkStream {
    fn on_http_call_response(&mut self, token_id: u32, num_headers: usize, body_size: usize, _num_trailers: usize) {
        self.0.on_http_call_response(token_id, num_headers, body_size);
    }
}

/// Host calls the SDK would panic on when Envoy refuses them.
#[allow(unsafe_code)]
mod raw {
    use proxy_wasm::types::{BufferType, Status as Sdk};

    use super::{Status, status};

    #[link(wasm_import_module = "env")]
    unsafe extern "C" {
        fn proxy_set_buffer_bytes(
            buffer_type: BufferType,
            start: usize,
            size: usize,
            buffer_data: *const u8,
            buffer_size: usize,
        ) -> Sdk;
    }

    /// Replaces the first `size` bytes of a buffer. The SDK's `set_buffer` panics on
    /// any refusal, and Envoy refuses when it holds no such buffer (`NotFound`).
    pub fn set_buffer_bytes(buffer: BufferType, size: usize, data: &[u8]) -> Result<(), Status> {
        // SAFETY: the host reads `data.len()` bytes at `data.as_ptr()`, which `data`
        // holds for the duration of the call, and writes nothing back.
        match unsafe { proxy_set_buffer_bytes(buffer, 0, size, data.as_ptr(), data.len()) } {
            Sdk::Ok => Ok(()),
            refused => Err(status(refused)),
        }
    }
}

// The SDK's entry point macro exports `_initialize`, which needs `no_mangle`.
#[allow(unsafe_code)]
mod entry {
    use super::*;

    proxy_wasm::main! {{
        proxy_wasm::set_log_level(LogLevel::Info);
        proxy_wasm::set_root_context(|_| Box::<SdkRoot>::default());
    }}
}
