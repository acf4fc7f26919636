//! The Wasm floor: a proxy-wasm filter that does what the infergate filter asks of
//! Envoy on a request, and nothing else, so that `make bench-datapath` can tell the
//! price of any body-reading Wasm filter from the price of infergate's own code.
//!
//! Per request, as the infergate filter: one read of every request header; the
//! request held until its body ends, each chunk read once as it arrives (the new bytes
//! only); then the two routing headers set (`x-infergate-pool` and
//! `x-gateway-destination-endpoint`, here the pool's next pod in turn), and the
//! request goes on. Nothing is parsed, hashed, decided, counted or shared, and the
//! answer passes untouched.
//!
//! It takes the infergate router role's plugin configuration, as rendered for the
//! filter, and reads from it only the first pool's name and pods. Other roles (the
//! control listener's filter, the singleton) get a filter that does nothing. Built with
//! the `scan` feature, it also feeds each chunk to infergate's request scanner (the
//! body's JSON checked, its prompt rendered and hashed) and finishes it at the end:
//! the scanner's cost in Envoy's V8, apart from the rest of the filter. Once a
//! second, off the request path, each router VM adds its linear memory's growth to the
//! gauge the infergate filter keeps, `infergate.vm.memory_bytes`, so that the bench reads
//! both alike. Bench only: it is not built by `make wasm` and never ships.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::cell::Cell;
use std::rc::Rc;

use infergate_core::wire::header;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, BufferType, ContextType, LogLevel, MapType, MetricType};

/// The infergate filter's gauge of its worker VMs' linear memory, summed.
const VM_MEMORY_GAUGE: &str = "infergate.vm.memory_bytes";

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Floor::default()) });
}}

/// Where requests go: the pool and its pods, from the router role's configuration.
#[derive(Default)]
struct Route {
    pool: String,
    pods: Vec<String>,
    /// The next pod, in turn.
    next: Cell<usize>,
}

impl Route {
    /// The first pool of a router role's configuration; `None` for any other role.
    fn from_configuration(bytes: &[u8]) -> Option<Self> {
        let config: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        if config.get("role")?.as_str()? != "router" {
            return None;
        }
        let pool = config.get("routing")?.get("pools")?.as_array()?.first()?;
        let pods = pool.get("endpoints")?.as_array()?.iter().filter_map(|p| p.as_str().map(String::from)).collect();
        Some(Self { pool: pool.get("name")?.as_str()?.to_string(), pods, next: Cell::new(0) })
    }

    fn next_pod(&self) -> Option<&str> {
        let at = self.next.get();
        self.next.set(at.wrapping_add(1));
        self.pods.get(at.checked_rem(self.pods.len())?).map(String::as_str)
    }
}

#[derive(Default)]
struct Floor {
    route: Option<Rc<Route>>,
    /// The memory gauge, and what this VM has added to it.
    memory: Option<(u32, u64)>,
}

impl Context for Floor {}

fn vm_memory_bytes() -> u64 {
    #[cfg(target_arch = "wasm32")]
    {
        (core::arch::wasm32::memory_size(0) as u64).saturating_mul(65_536)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        0
    }
}

impl RootContext for Floor {
    fn on_configure(&mut self, _size: usize) -> bool {
        let bytes = hostcalls::get_buffer(BufferType::PluginConfiguration, 0, usize::MAX).ok().flatten();
        self.route = bytes.as_deref().and_then(Route::from_configuration).map(Rc::new);
        if let Some(route) = &self.route {
            proxy_wasm::hostcalls::log(
                LogLevel::Info,
                &format!("infergate floor: pool {}, {} pods", route.pool, route.pods.len()),
            )
            .ok();
            self.memory = hostcalls::define_metric(MetricType::Gauge, VM_MEMORY_GAUGE).ok().map(|id| (id, 0));
            hostcalls::set_tick_period(std::time::Duration::from_secs(1)).ok();
        }
        true
    }

    fn on_tick(&mut self) {
        if let Some((gauge, reported)) = &mut self.memory {
            let now = vm_memory_bytes();
            let grown = i64::try_from(now.saturating_sub(*reported)).unwrap_or(i64::MAX);
            if hostcalls::increment_metric(*gauge, grown).is_ok() {
                *reported = now;
            }
        }
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Request::new(self.route.clone())))
    }
}

struct Request {
    /// `None`: not the router role; the request passes untouched.
    route: Option<Rc<Route>>,
    /// Body bytes read so far.
    read: usize,
    #[cfg(feature = "scan")]
    scanner: Option<infergate_core::request::RequestScanner>,
}

impl Request {
    fn new(route: Option<Rc<Route>>) -> Self {
        Self {
            route,
            read: 0,
            #[cfg(feature = "scan")]
            scanner: Some(infergate_core::request::RequestScanner::new(
                &infergate_core::config::PrefixSettings::default(),
            )),
        }
    }

    /// With the `scan` feature, the scanner reads `chunk`, and finishes at the end.
    #[cfg_attr(not(feature = "scan"), allow(unused_variables, clippy::unused_self))]
    fn scan(&mut self, chunk: Option<&[u8]>, end_of_stream: bool) {
        #[cfg(feature = "scan")]
        {
            if let (Some(scanner), Some(chunk)) = (self.scanner.as_mut(), chunk) {
                scanner.feed(chunk);
            }
            if end_of_stream {
                if let Some(scanner) = self.scanner.take() {
                    std::hint::black_box(scanner.finish());
                }
            }
        }
    }
}

impl Context for Request {}

impl HttpContext for Request {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let Some(route) = self.route.clone() else { return Action::Continue };
        let headers = hostcalls::get_map_bytes(MapType::HttpRequestHeaders).unwrap_or_default();
        std::hint::black_box(headers);
        if end_of_stream {
            set_route(&route);
            return Action::Continue;
        }
        Action::Pause
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let Some(route) = self.route.clone() else { return Action::Continue };
        let new = body_size.saturating_sub(self.read);
        let chunk = hostcalls::get_buffer(BufferType::HttpRequestBody, self.read, new).ok().flatten();
        self.scan(chunk.as_deref(), end_of_stream);
        std::hint::black_box(chunk);
        self.read = body_size;
        if !end_of_stream {
            return Action::Pause;
        }
        set_route(&route);
        Action::Continue
    }
}

fn set_route(route: &Route) {
    let pod = route.next_pod();
    hostcalls::set_map_value_bytes(MapType::HttpRequestHeaders, header::POOL, Some(route.pool.as_bytes())).ok();
    hostcalls::set_map_value_bytes(MapType::HttpRequestHeaders, header::ENDPOINT, pod.map(str::as_bytes)).ok();
}
