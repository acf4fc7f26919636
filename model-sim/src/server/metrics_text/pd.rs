//! The handover's counters. vLLM's NixlConnector exports transfer sizes and times,
//! failed transfers and expired leases as `vllm:nixl_*` (vLLM V1 names only); vLLM
//! counts no legs, so those two counters are model-sim's own, in every format.

use super::MetricsFormat;
use super::writer::{Writer, escape};
use crate::engine::Histogram;

/// vLLM's `nixl_bytes_transferred` buckets: 2 KiB to 8 GiB, every other power of two.
pub const TRANSFER_BYTES_BUCKETS: [f64; 12] = [
    2048.0,
    8192.0,
    32768.0,
    131072.0,
    524288.0,
    2097152.0,
    8388608.0,
    33554432.0,
    134217728.0,
    536870912.0,
    2147483648.0,
    8589934592.0,
];
/// vLLM's `nixl_xfer_time_seconds` buckets.
pub const TRANSFER_SECONDS_BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0];

#[derive(Debug, Clone, PartialEq)]
pub struct PdCounters {
    /// Prefill legs answered with `kv_transfer_params`.
    pub prefill_legs: u64,
    /// Decode legs whose prompt KV arrived and went to the engine.
    pub decode_legs: u64,
    /// Decode legs whose KV could not be claimed.
    pub failed_transfers: u64,
    /// Leases of prefilled prompts that ran out unclaimed.
    pub expired_leases: u64,
    /// Bytes per transfer.
    pub transfer_bytes: Histogram,
    /// Seconds per transfer, queueing on the link included.
    pub transfer_seconds: Histogram,
}

impl Default for PdCounters {
    fn default() -> Self {
        Self {
            prefill_legs: 0,
            decode_legs: 0,
            failed_transfers: 0,
            expired_leases: 0,
            transfer_bytes: Histogram::new(&TRANSFER_BYTES_BUCKETS),
            transfer_seconds: Histogram::new(&TRANSFER_SECONDS_BUCKETS),
        }
    }
}

pub fn render(format: MetricsFormat, model_name: &str, counters: &PdCounters) -> String {
    let labels = format!("engine=\"0\",model_name=\"{}\"", escape(model_name));
    let mut w = Writer::new();
    if format == MetricsFormat::Vllm {
        w.histogram(
            "vllm:nixl_xfer_time_seconds",
            "Histogram of transfer duration for NIXL KV Cache transfers.",
            &labels,
            &counters.transfer_seconds,
        )
        .histogram(
            "vllm:nixl_bytes_transferred",
            "Histogram of bytes transferred per NIXL KV Cache transfers.",
            &labels,
            &counters.transfer_bytes,
        )
        .family("vllm:nixl_num_failed_transfers", "counter", "Number of failed NIXL KV Cache transfers.")
        .sample("vllm:nixl_num_failed_transfers_total", &labels, counters.failed_transfers as f64)
        .family(
            "vllm:nixl_num_kv_expired_reqs",
            "counter",
            "Number of requests that had their KV expire. NOTE: This metric is tracked on the P instance.",
        )
        .sample("vllm:nixl_num_kv_expired_reqs_total", &labels, counters.expired_leases as f64);
    }
    w.family(
        "model_sim:pd_prefill_legs_total",
        "counter",
        "Prefill legs (do_remote_decode) answered with kv_transfer_params.",
    )
    .sample("model_sim:pd_prefill_legs_total", &labels, counters.prefill_legs as f64)
    .family(
        "model_sim:pd_decode_legs_total",
        "counter",
        "Decode legs (do_remote_prefill) whose prompt KV was transferred from a prefill pod.",
    )
    .sample("model_sim:pd_decode_legs_total", &labels, counters.decode_legs as f64);
    w.finish()
}

#[cfg(test)]
mod tests {
    use infergate_signals::exposition::parse;

    use super::*;

    #[test]
    fn every_format_parses_and_only_vllm_v1_has_the_nixl_names() {
        let mut counters = PdCounters { prefill_legs: 2, decode_legs: 1, failed_transfers: 3, ..PdCounters::default() };
        counters.transfer_bytes.observe(6000.0 * 131072.0);
        counters.transfer_seconds.observe(0.031);
        for format in [MetricsFormat::Vllm, MetricsFormat::VllmV0, MetricsFormat::Sglang, MetricsFormat::Trtllm] {
            let text = render(format, "m", &counters);
            let samples = parse(&text).unwrap();
            let value = |name: &str| samples.iter().find(|s| s.name == name).map(|s| s.value);
            assert_eq!(value("model_sim:pd_prefill_legs_total"), Some(2.0), "{format:?}");
            assert_eq!(value("model_sim:pd_decode_legs_total"), Some(1.0), "{format:?}");
            let nixl = value("vllm:nixl_bytes_transferred_sum");
            if format == MetricsFormat::Vllm {
                assert_eq!(nixl, Some(786_432_000.0));
                assert_eq!(value("vllm:nixl_num_failed_transfers_total"), Some(3.0));
                assert_eq!(value("vllm:nixl_xfer_time_seconds_count"), Some(1.0));
            } else {
                assert_eq!(nixl, None, "{format:?}");
            }
        }
    }
}
