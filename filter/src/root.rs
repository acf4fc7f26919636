//! The root context: reads the plugin configuration once and becomes one role.

use std::rc::Rc;

use infergate_core::filter_config::FilterConfig;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;

use crate::control::{ControlHttp, ControlShared};
use crate::global::{GlobalHttp, GlobalShared};
use crate::host;
use crate::router::{RouterHttp, RouterShared};
use crate::singleton::Singleton;

#[derive(Default)]
pub struct PluginRoot {
    role: Option<Role>,
}

enum Role {
    Router(Rc<RouterShared>),
    Control(Rc<ControlShared>),
    Singleton(Singleton),
    Global(Rc<GlobalShared>),
}

impl Context for PluginRoot {
    fn on_done(&mut self) -> bool {
        if let Some(Role::Router(shared)) = &self.role {
            shared.on_done();
        }
        true
    }
}

impl RootContext for PluginRoot {
    fn on_configure(&mut self, _size: usize) -> bool {
        let Some(bytes) = host::plugin_configuration() else {
            log::error!("infergate: no plugin configuration; set `configuration` with a role");
            return false;
        };
        let config = match FilterConfig::from_json(&bytes) {
            Ok(config) => config,
            Err(message) => {
                log::error!("infergate: {message}");
                return false;
            }
        };
        let role = match config {
            FilterConfig::Router(router) => Role::Router(Rc::new(RouterShared::new(*router))),
            FilterConfig::Control(control) => match ControlShared::new(control) {
                Ok(shared) => Role::Control(Rc::new(shared)),
                Err(message) => {
                    log::error!("infergate control: {message}");
                    return false;
                }
            },
            FilterConfig::Global(global) => Role::Global(Rc::new(GlobalShared::new(*global))),
            FilterConfig::Singleton => match Singleton::start() {
                Ok(singleton) => Role::Singleton(singleton),
                Err(message) => {
                    log::error!("infergate singleton: {message}");
                    return false;
                }
            },
        };
        self.role = Some(role);
        true
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        match &mut self.role {
            Some(Role::Singleton(singleton)) => singleton.publish_newest(queue_id),
            Some(Role::Router(shared)) => shared.drain_prefix_queue(queue_id),
            _ => {}
        }
    }

    fn on_tick(&mut self) {
        match &self.role {
            Some(Role::Router(shared)) => shared.on_tick(),
            Some(Role::Global(shared)) => shared.flush_usage(),
            _ => {}
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        // The SDK panics on `None`, so every role answers with some context.
        Some(match &self.role {
            Some(Role::Router(shared)) => {
                shared.on_request();
                Box::new(RouterHttp::new(Rc::clone(shared)))
            }
            Some(Role::Control(shared)) => Box::new(ControlHttp::new(Rc::clone(shared))),
            Some(Role::Global(shared)) => Box::new(GlobalHttp::new(Rc::clone(shared))),
            Some(Role::Singleton(_)) | None => Box::new(PassThrough),
        })
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// Used only if Envoy asks a non-HTTP role for an HTTP context: it does nothing.
struct PassThrough;

impl Context for PassThrough {}
impl HttpContext for PassThrough {}
