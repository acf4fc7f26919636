//! `tenants`: one pool shared by tenants of three priorities, through a minute of
//! overload. Four quiet standard tenants and a noisy one sending 5× each quiet one's
//! rate; an interactive application on the critical band; a batch job on the sheddable
//! band. The offered load is half the fleet's capacity for 10 s, 1.5× for 60 s, then
//! half again for 20 s, so the run shows the queue filling, holding and draining.
//!
//! Every request carries its class's TTFT target, the goodput bar: critical 500 ms;
//! standard 1 s for the interactive half of each tenant's requests and 8 s for the
//! rest; sheddable 20 s. Each tenant has a system prompt of its own (500 tokens)
//! before a question of 100–1,500 tokens; answers are log-normal around 150 tokens.

use infergate_core::config::Criticality;
use infergate_model_sim::engine::EngineProfile;

use crate::request::{Arrival, BenchRequest, render, text};
use crate::workloads::{BASE_MODEL, CalibrationPlan, Scenario, lognormal, poisson, weighted_index};

/// Who sends a request and what it asks of the gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct Tag {
    /// Who really sends it.
    pub tenant: &'static str,
    /// The tenant the gateway is told, when the sender lies (see [`Attack`]).
    pub presented: Option<String>,
    pub band: Criticality,
    /// Its TTFT target, milliseconds: the request header earliest-deadline reads, and
    /// the bar for goodput.
    pub ttft_target_ms: f64,
}

impl Tag {
    /// For workloads without tenants or classes: every request standard, of one
    /// anonymous tenant, with no target.
    pub fn untagged(scenario: &Scenario) -> Vec<Tag> {
        let tag = Tag { tenant: "", presented: None, band: Criticality::Standard, ttft_target_ms: f64::MAX };
        vec![tag; scenario.requests.len()]
    }
}

/// A tenant's share of the offered load and its requests' class.
struct Sender {
    tenant: &'static str,
    band: Criticality,
    share: f64,
}

pub const QUIET: [&str; 4] = ["quiet-1", "quiet-2", "quiet-3", "quiet-4"];
pub const NOISY: &str = "noisy";

/// Critical 10%, sheddable 15%, standard 75% split 1:1:1:1:5.
const SENDERS: [Sender; 7] = [
    Sender { tenant: "app", band: Criticality::Critical, share: 0.10 },
    Sender { tenant: QUIET[0], band: Criticality::Standard, share: 0.75 / 9.0 },
    Sender { tenant: QUIET[1], band: Criticality::Standard, share: 0.75 / 9.0 },
    Sender { tenant: QUIET[2], band: Criticality::Standard, share: 0.75 / 9.0 },
    Sender { tenant: QUIET[3], band: Criticality::Standard, share: 0.75 / 9.0 },
    Sender { tenant: NOISY, band: Criticality::Standard, share: 0.75 * 5.0 / 9.0 },
    Sender { tenant: "batch", band: Criticality::Sheddable, share: 0.15 },
];

pub struct Tenants {
    pub pods: usize,
    pub profile: EngineProfile,
    /// Requests per second the fleet completes when offered more (see `capacity`).
    pub capacity_qps: f64,
    /// Load phases: (until this time, multiple of capacity offered).
    pub phases: Vec<(f64, f64)>,
    /// What the noisy tenant claims to be, when the gateway takes a client's word.
    pub attack: Attack,
}

/// How the noisy tenant games a gateway that reads the tenant from a client header.
/// With a verified identity (a JWT claim) it cannot: that is [`Attack::None`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// It names itself.
    None,
    /// A new tenant id with every request.
    RotatingIds,
    /// A quiet tenant's id (`quiet-1`).
    CopiesQuiet,
}

impl Attack {
    pub const ALL: [Attack; 3] = [Attack::None, Attack::RotatingIds, Attack::CopiesQuiet];

    pub fn describe(self) -> &'static str {
        match self {
            Attack::None => "none, or the tenant verified (`identity: jwt`)",
            Attack::RotatingIds => "a new tenant id per request (client header)",
            Attack::CopiesQuiet => "copies quiet-1's tenant id (client header)",
        }
    }
}

impl Tenants {
    /// The published shape: 10 s at 0.5×, 60 s at 1.5×, 20 s at 0.5×.
    pub fn overload(capacity_qps: f64) -> Self {
        Self {
            pods: 4,
            profile: EngineProfile::LLAMA_3_1_8B_H100,
            capacity_qps,
            phases: vec![(10.0, 0.5), (70.0, 1.5), (90.0, 0.5)],
            attack: Attack::None,
        }
    }

    /// The same requests' shape at a constant load: `unloaded` (0.5×) gives each
    /// class's reference TTFT, and a high one measures capacity.
    pub fn constant(capacity_qps: f64, load: f64, duration_s: f64) -> Self {
        Self { phases: vec![(duration_s, load)], ..Self::overload(capacity_qps) }
    }

    pub fn duration_s(&self) -> f64 {
        self.phases.last().map_or(0.0, |p| p.0)
    }

    pub fn scenario(&self, seed: u64) -> (Scenario, Vec<Tag>) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let systems: Vec<String> = SENDERS.iter().map(|_| text(&mut rng, 500 * 4)).collect();
        let shares: Vec<f64> = SENDERS.iter().map(|s| s.share).collect();
        let mut arrivals = Vec::new();
        let mut start = 0.0;
        for &(end, load) in &self.phases {
            arrivals.extend(poisson(&mut rng, load * self.capacity_qps, start, end));
            start = end;
        }
        let (mut requests, mut tags) = (Vec::new(), Vec::new());
        for at in arrivals {
            let who = weighted_index(&mut rng, &shares);
            let sender = &SENDERS[who];
            let question_tokens = rng.usize(100..1_500);
            let question = text(&mut rng, question_tokens * 4);
            let prompt = render(&[("system", systems[who].as_str()), ("user", question.as_str())]);
            let ttft_target_ms = match sender.band {
                Criticality::Critical => 500.0,
                Criticality::Standard if rng.bool() => 1_000.0,
                Criticality::Standard => 8_000.0,
                Criticality::Sheddable => 20_000.0,
            };
            requests.push(BenchRequest {
                arrival: Arrival::At(at),
                model: BASE_MODEL.into(),
                adapter: None,
                prompt: prompt.into(),
                output_tokens: lognormal(&mut rng, 150.0, 0.6).clamp(8.0, 1_000.0) as u32,
                session: None,
            });
            let presented = match (self.attack, sender.tenant == NOISY) {
                (Attack::RotatingIds, true) => Some(format!("{NOISY}-{}", tags.len())),
                (Attack::CopiesQuiet, true) => Some(QUIET[0].to_string()),
                _ => None,
            };
            tags.push(Tag { tenant: sender.tenant, presented, band: sender.band, ttft_target_ms });
        }
        let scenario = Scenario {
            pods: self.pods,
            profile: self.profile,
            adapters: Vec::new(),
            requests,
            duration_s: self.duration_s(),
            calibration: CalibrationPlan::NONE,
        };
        (scenario, tags)
    }
}
