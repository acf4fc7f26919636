//! A plugin's start: read the plugin configuration once and become one role.

use std::rc::Rc;

use infergate_core::filter_config::FilterConfig;

use crate::host::Host;
use crate::host::events::RootEvents;
use crate::roles::control::ControlShared;
use crate::roles::global::GlobalShared;
use crate::roles::router::RouterShared;
use crate::roles::singleton::Singleton;

/// The role the configuration names, or `None` (logged) if it cannot start: Envoy
/// then refuses the plugin.
pub fn configure(host: Rc<dyn Host>) -> Option<Box<dyn RootEvents>> {
    let Some(bytes) = host.plugin_configuration() else {
        log::error!("infergate: no plugin configuration; set `configuration` with a role");
        return None;
    };
    let config = match FilterConfig::from_json(&bytes) {
        Ok(config) => config,
        Err(message) => {
            log::error!("infergate: {message}");
            return None;
        }
    };
    let started: Result<Box<dyn RootEvents>, String> = match config {
        FilterConfig::Router(router) => Ok(Box::new(Rc::new(RouterShared::new(host, *router)))),
        FilterConfig::Control(control) => ControlShared::new(host, control)
            .map(|shared| Box::new(Rc::new(shared)) as Box<dyn RootEvents>)
            .map_err(|message| format!("infergate control: {message}")),
        FilterConfig::Global(global) => Ok(Box::new(Rc::new(GlobalShared::new(host, *global)))),
        FilterConfig::Singleton => Singleton::start(host)
            .map(|singleton| Box::new(singleton) as Box<dyn RootEvents>)
            .map_err(|message| format!("infergate singleton: {message}")),
    };
    started.map_err(|message| log::error!("{message}")).ok()
}
