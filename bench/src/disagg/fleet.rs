//! The disaggregated fleet: which pods prefill and which decode, the link a split
//! request's KV cache crosses, and the routing config infergate's router is given for
//! it (the pool's `disaggregation` section, as an operator would write it).

use infergate_core::config::{Disaggregation, PodRole, SplitPolicy};
use infergate_model_sim::engine::EngineProfile;
use serde::Serialize;

use crate::fleet::FleetConfig;

/// How a fleet's pods are given roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Layout {
    /// Every pod prefills and decodes.
    Aggregated,
    /// The first `prefill` pods only prefill; the others only decode.
    Split { prefill: usize },
    /// The first `both` pods prefill split requests and serve whole ones; the others
    /// only decode. For traffic that is mostly cached (agentic sessions), where a
    /// prefill-only pod would idle while every decode pod is busy.
    Hybrid { both: usize },
}

impl Layout {
    /// Each pod's role, for a fleet of `pods`.
    pub fn roles(self, pods: usize) -> Vec<PodRole> {
        match self {
            Layout::Aggregated => vec![PodRole::Both; pods],
            Layout::Split { prefill } => {
                (0..pods).map(|i| if i < prefill { PodRole::Prefill } else { PodRole::Decode }).collect()
            }
            Layout::Hybrid { both } => {
                (0..pods).map(|i| if i < both { PodRole::Both } else { PodRole::Decode }).collect()
            }
        }
    }

    /// "8 pods, each both", "3 prefill + 5 decode".
    pub fn describe(self, pods: usize) -> String {
        match self {
            Layout::Aggregated => format!("{pods} pods, each prefill and decode"),
            Layout::Split { prefill } => format!("{prefill} prefill + {} decode", pods.saturating_sub(prefill)),
            Layout::Hybrid { both } => {
                format!("{both} prefill-and-decode + {} decode", pods.saturating_sub(both))
            }
        }
    }

    /// "3P5D", "3B5D" (3 both + 5 decode) or "agg", for names and file stems.
    pub fn short(self, pods: usize) -> String {
        match self {
            Layout::Aggregated => "agg".into(),
            Layout::Split { prefill } => format!("{prefill}P{}D", pods.saturating_sub(prefill)),
            Layout::Hybrid { both } => format!("{both}B{}D", pods.saturating_sub(both)),
        }
    }
}

/// The network between a prefill pod and a decode pod. Each decode pod pulls one
/// transfer at a time: transfers to one pod queue behind each other.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Link {
    /// 2 × layers × KV heads × head size × bytes per value.
    pub kv_bytes_per_token: u64,
    pub gb_per_s: f64,
}

/// The link's bandwidth, gigabytes per second: a 200 Gb/s RDMA NIC, about half of the
/// "up to 400 Gbps" RoCE figure the peers' docs give (none ships a measured number).
pub const LINK_GB_PER_S: f64 = 25.0;

impl Link {
    /// Llama-3.1-8B's KV per token in the profile's cache format: 128 KiB in BF16, half
    /// that with the FP8 KV cache (the agentic workload's pods).
    pub fn for_profile(profile: &EngineProfile) -> Self {
        let fp8 = *profile == EngineProfile::LLAMA_3_1_8B_H100_FP8_KV;
        Self { kv_bytes_per_token: if fp8 { 65_536 } else { 131_072 }, gb_per_s: LINK_GB_PER_S }
    }

    /// Seconds to move the KV cache of `tokens` prompt tokens.
    pub fn seconds(&self, tokens: u64) -> f64 {
        tokens as f64 * self.kv_bytes_per_token as f64 / (self.gb_per_s * 1e9)
    }
}

/// The routing config of a fleet of `pods` with `layout`: the bench's usual one pool,
/// and, when the pods have roles, its `disaggregation` section with the link and
/// `split` (`None` keeps the section out: infergate then routes the pool whole).
pub fn fleet_config(pods: usize, layout: Layout, link: Link, split: Option<SplitPolicy>) -> FleetConfig {
    let mut fleet = FleetConfig::new(pods, &[]);
    let Some(split) = split.filter(|_| layout != Layout::Aggregated) else { return fleet };
    // Pods in neither list do both.
    let with_role = |role: PodRole| -> Vec<_> {
        fleet.endpoints.iter().zip(layout.roles(pods)).filter(|(_, r)| *r == role).map(|(e, _)| *e).collect()
    };
    let disaggregation = Disaggregation {
        split,
        prefill_endpoints: with_role(PodRole::Prefill),
        decode_endpoints: with_role(PodRole::Decode),
        kv_bytes_per_token: link.kv_bytes_per_token,
        transfer_gb_per_s: link.gb_per_s,
        ..Disaggregation::default()
    };
    for pool in &mut fleet.routing.pools {
        pool.disaggregation = Some(disaggregation.clone());
    }
    fleet
}
