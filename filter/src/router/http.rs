//! One request through the router: strip spoofable headers, buffer the body, decide,
//! set the routing headers, and release the in-flight count when the stream ends.

use std::rc::Rc;

use infergate_core::ApiError;
use infergate_core::endpoint::Endpoint;
use infergate_core::request::{ApiEndpoint, classify, parse_request};
use infergate_core::router::{Decision, DecisionBasis};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

use super::RouterShared;
use crate::host;

/// Headers only the gateway may set; a client's copies are removed before routing.
const RESERVED_PREFIXES: [&str; 2] = ["x-gateway-", "x-infergate-"];
pub const ENDPOINT_HEADER: &str = "x-gateway-destination-endpoint";
pub const MODEL_HEADER: &str = "x-gateway-model-name";
/// The route match key: which pool's cluster serves the request.
pub const POOL_HEADER: &str = "x-infergate-pool";
pub const DECISION_HEADER: &str = "x-infergate-decision";

pub struct RouterHttp {
    shared: Rc<RouterShared>,
    dispatched_to: Option<Endpoint>,
    explanation: Option<String>,
}

impl RouterHttp {
    pub fn new(shared: Rc<RouterShared>) -> Self {
        Self {
            shared,
            dispatched_to: None,
            explanation: None,
        }
    }

    fn reject(&self, error: &ApiError) -> Action {
        self.shared.metrics.rejected.increment();
        let retry_after = error.retry_after_s.map(|s| s.to_string());
        let mut headers = vec![("content-type", "application/json")];
        if let Some(seconds) = retry_after.as_deref() {
            headers.push(("retry-after", seconds));
        }
        host::reply(u32::from(error.status), headers, &error.body());
        Action::Pause
    }

    fn decide(&mut self, body: &[u8]) -> Result<Decision, ApiError> {
        let request = parse_request(body)?;
        let Ok(mut router) = self.shared.router.try_borrow_mut() else {
            return Err(ApiError::no_ready_endpoint("(busy)", 1));
        };
        let now_ms = host::now_unix_ms();
        self.shared.refresh_snapshot(&mut router, now_ms);
        let decision = router.route(&request, now_ms)?;
        self.dispatched_to = decision.endpoints.first().copied();
        let header_ok = host::set_request_header(POOL_HEADER, Some(&decision.pool))
            .and_then(|()| host::set_request_header(MODEL_HEADER, Some(&request.model)))
            .and_then(|()| {
                host::set_request_header(ENDPOINT_HEADER, Some(&decision.endpoint_header()))
            });
        if let Err(status) = header_ok {
            log::error!("infergate router: cannot set routing headers: {status:?}");
        }
        Ok(decision)
    }

    fn record(&mut self, decision: &Decision) {
        let metrics = &self.shared.metrics;
        let (counter, basis) = match decision.basis {
            DecisionBasis::Signals => (metrics.decisions_signals, "signals"),
            DecisionBasis::Mixed => (metrics.decisions_mixed, "mixed"),
            DecisionBasis::LoadOnly => (metrics.decisions_load_only, "load-only"),
        };
        counter.increment();
        if self.shared.explain {
            self.explanation = Some(format!(
                "pool={}; basis={basis}; endpoints={}",
                decision.pool,
                decision.endpoint_header()
            ));
        }
    }
}

impl Context for RouterHttp {}

impl HttpContext for RouterHttp {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        for name in host::request_header_names() {
            let lower = name.to_ascii_lowercase();
            if RESERVED_PREFIXES.iter().any(|p| lower.starts_with(p)) {
                let _ = host::set_request_header(&name, None);
            }
        }
        let method = host::request_header(":method").unwrap_or_default();
        let path = host::request_header(":path").unwrap_or_default();
        match classify(&method, &path) {
            ApiEndpoint::ListModels => {
                let body = match self.shared.router.try_borrow() {
                    Ok(router) => router.model_list_body(host::now_unix_ms() / 1000),
                    Err(_) => return self.reject(&ApiError::no_ready_endpoint("(busy)", 1)),
                };
                host::reply(200, vec![("content-type", "application/json")], &body);
                Action::Pause
            }
            ApiEndpoint::Unknown => self.reject(&ApiError::not_found_path(&path)),
            ApiEndpoint::Inference => {
                let declared =
                    host::request_header("content-length").and_then(|v| v.parse::<u64>().ok());
                if declared.is_some_and(|len| len > self.shared.max_body_bytes) {
                    return self.reject(&ApiError::body_too_large(self.shared.max_body_bytes));
                }
                if end_of_stream {
                    return self.reject(&ApiError::invalid_request(
                        "invalid_body",
                        None,
                        "The request has no body; send a JSON object with a `model` field.",
                    ));
                }
                Action::Pause
            }
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if u64::try_from(body_size).unwrap_or(u64::MAX) > self.shared.max_body_bytes {
            return self.reject(&ApiError::body_too_large(self.shared.max_body_bytes));
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let body = host::request_body(body_size).unwrap_or_default();
        match self.decide(&body) {
            Ok(decision) => {
                self.record(&decision);
                Action::Continue
            }
            Err(error) => self.reject(&error),
        }
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        if let Some(explanation) = &self.explanation {
            let _ = host::set_response_header(DECISION_HEADER, explanation);
        }
        Action::Continue
    }

    fn on_log(&mut self) {
        if let Some(endpoint) = self.dispatched_to.take() {
            if let Ok(mut router) = self.shared.router.try_borrow_mut() {
                router.release(endpoint);
            }
        }
    }
}
