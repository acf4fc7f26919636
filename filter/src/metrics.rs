//! One stat in Envoy's stats (`wasmcustom.<name>`). Ids are per VM, so each root
//! context defines its own; a failed definition just disables that metric. The roles'
//! sets of metrics live with the roles.

use std::rc::Rc;

use crate::host::{Host, MetricKind};

#[derive(Clone)]
pub struct Metric {
    host: Rc<dyn Host>,
    id: Option<u32>,
}

impl Metric {
    fn define(host: &Rc<dyn Host>, kind: MetricKind, name: &str) -> Self {
        Self { host: Rc::clone(host), id: host.define_metric(kind, name).ok() }
    }

    pub fn counter(host: &Rc<dyn Host>, name: &str) -> Self {
        Self::define(host, MetricKind::Counter, name)
    }

    pub fn gauge(host: &Rc<dyn Host>, name: &str) -> Self {
        Self::define(host, MetricKind::Gauge, name)
    }

    pub fn histogram(host: &Rc<dyn Host>, name: &str) -> Self {
        Self::define(host, MetricKind::Histogram, name)
    }

    pub fn increment(&self) {
        if let Some(id) = self.id {
            let _ = self.host.increment_metric(id, 1);
        }
    }

    /// Sets a gauge, or records a histogram sample.
    pub fn set(&self, value: u64) {
        if let Some(id) = self.id {
            let _ = self.host.record_metric(id, value);
        }
    }

    /// Moves a gauge by `delta`. Every worker VM's gauge of one name is one stat, so
    /// moves from all workers add up where a `set` from one would overwrite the others.
    pub fn shift(&self, delta: i64) {
        if let (Some(id), true) = (self.id, delta != 0) {
            let _ = self.host.increment_metric(id, delta);
        }
    }
}
