//! NVIDIA Dynamo's disaggregated routing with conditional disaggregation on
//! (`--router-mode kv --router-conditional-disagg`, policy `isl_bounding` at its
//! defaults 2,048 tokens and 0.7), from the stored `ai-dynamo/dynamo` files
//! `lib/kv-router/src/conditional_disagg.rs` @`088ca50b`,
//! `lib/llm/src/kv_router/prefill_router/conditional_bypass.rs` @`07a6c9ce` and
//! `docs/components/router/{router-disaggregated-serving.md @2e4735e3,
//! router-concepts.md @03037af0, router-configuration.md @057096c3}`.
//!
//! 1. Peek the decode router: in disaggregated mode it runs with
//!    `overlap_score_credit = 0`, `assume_kv_reuse = false` and
//!    `track_prefill_tokens = false`, so its cost is the worker's active decode blocks
//!    (every live request's prompt blocks, shared or not) plus the request's own: the
//!    least loaded decode worker wins, ties at random.
//! 2. `eff_isl = prompt − tokens cached on that worker` (KV events: read here from its
//!    engine); the prefill is local there, with no remote leg, when `eff_isl < 2048`
//!    and `eff_isl / prompt < 0.7`, both strict.
//! 3. Otherwise the prefill router (KV router, `track_active_blocks = false`): per
//!    prefill worker `max((active prefill tokens + prompt) / block − overlap blocks, 0)`
//!    with `overlap_score_credit` 1 and `prefill_load_scale` 1; the lowest wins, ties at
//!    random (temperature 0). A prefill counts on its worker, in uncached tokens, until
//!    it returns.
//!
//! Prefill failures (which fail the request unless `--decode-fallback`) do not occur
//! in the simulator.

use std::collections::HashMap;

use infergate_core::wire::CHARS_PER_TOKEN;

use crate::disagg::policy::{PdChoice, PdContext, PdPolicy, decode_pods, prefill_pods};
use crate::policies::{HashedOnce, argmax};

const EFF_ISL_THRESHOLD: u64 = 2_048;
const EFF_ISL_RATIO_THRESHOLD: f64 = 0.7;
const OVERLAP_SCORE_CREDIT: f64 = 1.0;
const PREFILL_LOAD_SCALE: f64 = 1.0;

pub struct DynamoPd {
    rng: fastrand::Rng,
    /// Per pod: prompt blocks of the requests decoding there (routed, not finished).
    decode_blocks: Vec<u64>,
    /// Per pod: uncached prompt tokens of the prefill legs sent there, not returned.
    prefill_tokens: Vec<u64>,
    routed: HashMap<usize, Routed>,
}

struct Routed {
    decode: usize,
    blocks: u64,
    /// The prefill leg's pod and tokens, until it returns.
    prefill: Option<(usize, u64)>,
}

impl DynamoPd {
    pub fn new(pods: usize, seed: u64) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(seed),
            decode_blocks: vec![0; pods],
            prefill_tokens: vec![0; pods],
            routed: HashMap::new(),
        }
    }

    fn release_prefill(&mut self, id: usize) {
        if let Some((pod, tokens)) = self.routed.get_mut(&id).and_then(|r| r.prefill.take()) {
            if let Some(t) = self.prefill_tokens.get_mut(pod) {
                *t = t.saturating_sub(tokens);
            }
        }
    }
}

impl PdPolicy for DynamoPd {
    fn name(&self) -> String {
        "pd/dynamo".into()
    }

    fn route(&mut self, ctx: &PdContext<'_>) -> PdChoice {
        let prompt = ctx.request.prompt.bytes();
        let isl = (prompt.len().div_ceil(CHARS_PER_TOKEN) as u64).max(1);
        let mut hashed = HashedOnce::default();
        let mut overlap_tokens = |pod: usize| -> (u64, u64) {
            let Some(engine) = ctx.engines.get(pod) else { return (16, 0) };
            let block = engine.profile().block_size.max(1);
            let hashes = hashed.get(&prompt, ctx.request.adapter.as_deref(), block);
            (u64::from(block), engine.cached_prefix_blocks(hashes) as u64 * u64::from(block))
        };
        // 1. The decode router's pick.
        let decodes = decode_pods(ctx.roles);
        let block = ctx.engines.first().map_or(16, |e| u64::from(e.profile().block_size.max(1)));
        let blocks = isl.div_ceil(block);
        let costs: Vec<f64> =
            decodes.iter().map(|&p| -((self.decode_blocks.get(p).copied().unwrap_or(0) + blocks) as f64)).collect();
        let decode = decodes.get(argmax(&costs, &mut self.rng)).copied().unwrap_or(0);
        // 2. Conditional disaggregation.
        let (_, cached) = overlap_tokens(decode);
        let eff_isl = isl.saturating_sub(cached);
        let ratio = eff_isl as f64 / isl as f64;
        let local = eff_isl < EFF_ISL_THRESHOLD && ratio < EFF_ISL_RATIO_THRESHOLD;
        // 3. The prefill router.
        let prefills: Vec<usize> = prefill_pods(ctx.roles).into_iter().filter(|&p| p != decode).collect();
        let prefill = if local || prefills.is_empty() {
            None
        } else {
            let views: Vec<(u64, u64)> = prefills.iter().map(|&p| overlap_tokens(p)).collect();
            let costs: Vec<f64> = prefills
                .iter()
                .zip(&views)
                .map(|(&p, &(bs, overlap))| {
                    let active = self.prefill_tokens.get(p).copied().unwrap_or(0);
                    let raw = (active + isl) as f64 / bs as f64;
                    -(PREFILL_LOAD_SCALE * (raw - OVERLAP_SCORE_CREDIT * (overlap / bs) as f64).max(0.0))
                })
                .collect();
            let best = argmax(&costs, &mut self.rng);
            prefills.get(best).copied().zip(views.get(best).map(|&(_, overlap)| isl.saturating_sub(overlap)))
        };
        if let Some(b) = self.decode_blocks.get_mut(decode) {
            *b += blocks;
        }
        if let Some((pod, tokens)) = prefill {
            if let Some(t) = self.prefill_tokens.get_mut(pod) {
                *t += tokens;
            }
        }
        self.routed.insert(ctx.id, Routed { decode, blocks, prefill });
        PdChoice { decode, prefill: prefill.map(|(p, _)| p) }
    }

    fn on_prefill_done(&mut self, id: usize, _pod: usize, _at: f64) {
        self.release_prefill(id);
    }

    fn on_finish(&mut self, id: usize, _pod: usize, _at: f64) {
        self.release_prefill(id);
        if let Some(routed) = self.routed.remove(&id) {
            if let Some(b) = self.decode_blocks.get_mut(routed.decode) {
                *b = b.saturating_sub(routed.blocks);
            }
        }
    }
}
