//! AIBrix's `pd` router, vllm-project/aibrix HEAD `e3e10f9e` (v0.7.0-156):
//! `pkg/plugins/gateway/algorithms/pd_disaggregation.go` with
//! `pd/{prefill_scorer,decode_scorer}.go` and `pkg/cache/cache_metrics.go`, at their
//! defaults. Every request is split; the gateway sends the prefill itself.
//!
//! 1. Prefill fast path: if the gateway's outstanding prefill counts spread by more
//!    than 16, the least loaded prefill pod.
//! 2. Decode fast paths, in order, over each decode pod's requests (the gateway's
//!    running count plus those whose prefill is under way): a spread of 16 or more ⇒
//!    the least; a generation-throughput spread over 2,048 tok/s ⇒ the slowest (vLLM V1
//!    exports no `avg_generation_throughput_toks_per_s`: the check never fires and the
//!    throughput term below is 1 for every pod); if every pod's 1-minute drain rate
//!    (completions per second) is positive and `requests / rate` spreads by more than
//!    1.5× ⇒ the lowest.
//! 3. Prefill score (lower wins), skipping pods whose count exceeds mean + 1σ:
//!    `(100 − match%) · 0.1 + count / max count`, the match from the gateway's prefix
//!    hash table of prompts sent to each prefill pod.
//! 4. Decode score (lower wins): `(requests / max requests + 1 − throughput / max
//!    throughput) / (free KV% / max free KV%)`, free KV% = `round(100 − 100·usage)`,
//!    floored at 0.1, from the scrape.
//! 5. Joint pick per roleset, `prefill / max prefill + decode / max decode`: the fleet
//!    is one roleset, so the best prefill pod and the best decode pod.
//!
//! Ties go to the first of a shuffled order, as the router shuffles its pods. The
//! prefix table hashes 64-token blocks here (AIBrix's are smaller); the match
//! percentage is the same up to the rounding of the last block.

use std::collections::{HashMap, VecDeque};

use infergate_core::config::PodRole;
use infergate_model_sim::engine::Engine;

use super::routed_index::{RoutedIndex, block_hashes};
use crate::disagg::policy::{PdChoice, PdContext, PdPolicy, decode_pods, prefill_pods};
use crate::fleet::ScrapeView;
use crate::policies::scraped;

const PREFILL_IMBALANCE_SPREAD: u32 = 16;
const DECODE_IMBALANCE_SPREAD: f64 = 16.0;
const DRAIN_SCORE_RATIO: f64 = 1.5;
const DRAIN_RATE_EPSILON: f64 = 0.1;
const STDDEV_FACTOR: f64 = 1.0;
const DRAIN_WINDOW_S: f64 = 60.0;
const TABLE_BLOCKS: u64 = 200_000;
const BLOCK_TOKENS: usize = 64;

pub struct AibrixPd {
    rng: fastrand::Rng,
    index: RoutedIndex,
    /// Per pod: prefill legs sent and not returned.
    prefills: Vec<u32>,
    /// Per pod: requests sent to decode there and not finished.
    decodes: Vec<u32>,
    /// Per pod: when its last minute's requests finished.
    finished: Vec<VecDeque<f64>>,
    routed: HashMap<usize, (usize, Option<usize>)>,
}

impl AibrixPd {
    pub fn new(roles: &[PodRole], seed: u64) -> Self {
        let pods = roles.len();
        Self {
            rng: fastrand::Rng::with_seed(seed),
            index: RoutedIndex::new(pods, TABLE_BLOCKS),
            prefills: vec![0; pods],
            decodes: vec![0; pods],
            finished: vec![VecDeque::new(); pods],
            routed: HashMap::new(),
        }
    }

    fn drain_rate(&self, pod: usize, now: f64) -> f64 {
        let recent = self.finished.get(pod).map_or(0, |f| f.iter().filter(|t| **t > now - DRAIN_WINDOW_S).count());
        recent as f64 / DRAIN_WINDOW_S
    }

    fn prefill_pick(&self, pods: &[usize], hashes: &[u64]) -> Option<usize> {
        let count = |p: usize| self.prefills.get(p).copied().unwrap_or(0);
        let counts: Vec<u32> = pods.iter().map(|&p| count(p)).collect();
        let (min, max) = (counts.iter().min().copied()?, counts.iter().max().copied()?);
        if max - min > PREFILL_IMBALANCE_SPREAD {
            return pods.iter().copied().find(|&p| count(p) == min);
        }
        let n = counts.len() as f64;
        let mean = counts.iter().map(|&c| f64::from(c)).sum::<f64>() / n;
        let std = (counts.iter().map(|&c| (f64::from(c) - mean).powi(2)).sum::<f64>() / n).sqrt();
        let max_count = f64::from(max).max(1.0);
        let mut best: Option<(usize, f64)> = None;
        for &p in pods {
            let c = f64::from(count(p));
            if c > mean + STDDEV_FACTOR * std {
                continue;
            }
            let percent = if hashes.is_empty() { 0 } else { self.index.matched(p, hashes) * 100 / hashes.len() } as f64;
            let score = (100.0 - percent) * 0.1 + c / max_count;
            if best.is_none_or(|(_, s)| score < s) {
                best = Some((p, score));
            }
        }
        best.map(|(p, _)| p)
    }

    fn decode_pick(&self, ctx: &PdContext<'_>, pods: &[usize]) -> Option<usize> {
        let requests: Vec<f64> = pods.iter().map(|&p| f64::from(self.decodes.get(p).copied().unwrap_or(0))).collect();
        let lowest = |values: &[f64]| -> Option<usize> {
            let min = values.iter().copied().fold(f64::INFINITY, f64::min);
            values.iter().position(|v| *v <= min).and_then(|i| pods.get(i).copied())
        };
        let (min, max) = requests.iter().fold((f64::INFINITY, 0.0_f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
        if max - min >= DECODE_IMBALANCE_SPREAD {
            return lowest(&requests);
        }
        let rates: Vec<f64> = pods.iter().map(|&p| self.drain_rate(p, ctx.now)).collect();
        if rates.iter().all(|r| *r > 0.0) {
            let scores: Vec<f64> =
                requests.iter().zip(&rates).map(|(r, rate)| r / rate.max(DRAIN_RATE_EPSILON)).collect();
            let (lo, hi) = scores.iter().fold((f64::INFINITY, 0.0_f64), |(lo, hi), s| (lo.min(*s), hi.max(*s)));
            if lo > 0.0 && hi / lo > DRAIN_SCORE_RATIO {
                return lowest(&scores);
            }
        }
        let free: Vec<f64> = pods
            .iter()
            .map(|&p| {
                let percent = (100.0 - 100.0 * scraped(ctx.scrape, p).kv_cache_usage.unwrap_or(0.0)).round();
                if percent <= 0.0 { 0.1 } else { percent }
            })
            .collect();
        let max_free = free.iter().copied().fold(1.0, f64::max);
        let max_requests = max.max(1.0);
        // No throughput metric: `1 − 0 / 1` for every pod.
        let throughput_term = 1.0;
        let scores: Vec<f64> =
            requests.iter().zip(&free).map(|(r, f)| (r / max_requests + throughput_term) / (f / max_free)).collect();
        lowest(&scores)
    }
}

impl PdPolicy for AibrixPd {
    fn name(&self) -> String {
        "pd/aibrix".into()
    }

    fn on_scrape(&mut self, _scrape: &ScrapeView, _engines: &[Engine], now: f64) {
        for finished in &mut self.finished {
            while finished.front().is_some_and(|t| *t <= now - DRAIN_WINDOW_S) {
                finished.pop_front();
            }
        }
    }

    fn route(&mut self, ctx: &PdContext<'_>) -> PdChoice {
        let mut prefills = prefill_pods(ctx.roles);
        let mut decodes = decode_pods(ctx.roles);
        self.rng.shuffle(&mut prefills);
        self.rng.shuffle(&mut decodes);
        let hashes = block_hashes(&ctx.request.prompt.bytes(), &ctx.request.model, BLOCK_TOKENS, 0);
        let prefill = self.prefill_pick(&prefills, &hashes);
        let decode = self.decode_pick(ctx, &decodes).unwrap_or(0);
        let prefill = prefill.filter(|&p| p != decode);
        if let Some(p) = prefill {
            self.index.record(p, &hashes);
            if let Some(c) = self.prefills.get_mut(p) {
                *c += 1;
            }
        }
        if let Some(c) = self.decodes.get_mut(decode) {
            *c += 1;
        }
        self.routed.insert(ctx.id, (decode, prefill));
        PdChoice { decode, prefill }
    }

    fn on_prefill_done(&mut self, id: usize, _pod: usize, _at: f64) {
        if let Some(p) = self.routed.get_mut(&id).and_then(|r| r.1.take()) {
            if let Some(c) = self.prefills.get_mut(p) {
                *c = c.saturating_sub(1);
            }
        }
    }

    fn on_finish(&mut self, id: usize, _pod: usize, at: f64) {
        self.on_prefill_done(id, 0, at);
        if let Some((decode, _)) = self.routed.remove(&id) {
            if let Some(c) = self.decodes.get_mut(decode) {
                *c = c.saturating_sub(1);
            }
            if let Some(f) = self.finished.get_mut(decode) {
                f.push_back(at);
            }
        }
    }
}
