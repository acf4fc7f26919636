//! SGLang's gateway in PD mode, as Shepherd Model Gateway v1.9.0 (its continuation,
//! HEAD `73da68ca`) runs it: `model_gateway/src/routers/http/pd_router.rs` with
//! `--prefill-policy` and `--decode-policy` unset, so each side inherits `--policy`,
//! `cache_aware` at its defaults (`crate::policies::SglangCacheAware`). Every request
//! is split; the prefill pod is chosen by one instance over the prefill workers, the
//! decode pod by another over the decode workers, independently, each with its own
//! tree and its own loads (requests sent and not answered: a prefill until it
//! returns, a decode until its last token).

use infergate_core::config::PodRole;

use crate::disagg::policy::{PdChoice, PdContext, PdPolicy, decode_pods, prefill_pods};
use crate::policies::{PickContext, Policy, SglangCacheAware};

pub struct SglangPd {
    prefill: Side,
    decode: Side,
}

/// One side's workers (a run of consecutive pods, as the layouts put them) and policy.
struct Side {
    first: usize,
    count: usize,
    policy: SglangCacheAware,
}

impl Side {
    fn new(pods: &[usize]) -> Self {
        let first = pods.first().copied().unwrap_or(0);
        Self { first, count: pods.len(), policy: SglangCacheAware::new(pods.len()) }
    }

    fn pick(&mut self, ctx: &PdContext<'_>) -> Option<usize> {
        let range = self.first..self.first + self.count;
        let pick = PickContext {
            id: ctx.id,
            request: ctx.request,
            now: ctx.now,
            engines: ctx.engines.get(range.clone())?,
            scrape: ctx.scrape,
            in_flight: ctx.in_flight.get(range)?,
        };
        Some(self.first + self.policy.pick(&pick).min(self.count.saturating_sub(1)))
    }
}

impl SglangPd {
    pub fn new(roles: &[PodRole]) -> Self {
        Self { prefill: Side::new(&prefill_pods(roles)), decode: Side::new(&decode_pods(roles)) }
    }
}

impl PdPolicy for SglangPd {
    fn name(&self) -> String {
        "pd/sglang".into()
    }

    fn route(&mut self, ctx: &PdContext<'_>) -> PdChoice {
        let prefill = self.prefill.pick(ctx);
        let decode = self.decode.pick(ctx).unwrap_or(0);
        PdChoice { decode, prefill: prefill.filter(|&p| p != decode) }
    }
}
