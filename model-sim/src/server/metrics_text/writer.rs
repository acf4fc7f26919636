//! Writes metric families in the text exposition format.

use std::fmt::Write;

use crate::engine::Histogram;

pub(super) struct Writer {
    out: String,
}

pub(super) fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl Writer {
    pub fn new() -> Self {
        Self { out: String::with_capacity(4096) }
    }

    pub fn family(&mut self, name: &str, kind: &str, help: &str) -> &mut Self {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        self
    }

    pub fn sample(&mut self, name: &str, labels: &str, value: f64) -> &mut Self {
        if labels.is_empty() {
            let _ = writeln!(self.out, "{name} {value:?}");
        } else {
            let _ = writeln!(self.out, "{name}{{{labels}}} {value:?}");
        }
        self
    }

    pub fn histogram(&mut self, name: &str, help: &str, labels: &str, histogram: &Histogram) -> &mut Self {
        self.family(name, "histogram", help);
        let sep = if labels.is_empty() { "" } else { "," };
        for (le, count) in histogram.cumulative() {
            let _ = writeln!(self.out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {:?}", count as f64);
        }
        let _ = writeln!(self.out, "{name}_sum{{{labels}}} {:?}", histogram.sum);
        let _ = writeln!(self.out, "{name}_count{{{labels}}} {:?}", histogram.count as f64);
        self
    }

    pub fn finish(self) -> String {
        self.out
    }
}
