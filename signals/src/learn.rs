//! Learns each pod's speeds from its own counters, as exponentially weighted moving
//! averages of per-interval deltas (never of lifetime ratios, which stop moving):
//!
//! - prefill rate = Δ(prompt tokens − cached tokens) / min(Δ(prefill time), Δt), until
//!   windows of different mixes (cold prompts and cache hits) let `prefill_fit` take
//!   the per-request overhead out of it; then the fitted rate.
//!   Where the engine counts its prefix-cache hits only in blocks, or in a unit its
//!   text does not say (vLLM 0.7.3–0.9.1), Δ(cached tokens) = Δ(prompt tokens) ×
//!   Δ(hits) / Δ(queries): the unit cancels. The
//!   prefill times of concurrent requests overlap, so their sum overstates the time the
//!   engine spent; by Little's law their sum over Δt is the mean number of requests in
//!   prefill, and when it exceeds one the engine was prefilling all interval long;
//! - decode step time = Δ(inter-token latency sum) / Δ(inter-token latency count);
//! - mean uncached prompt = Δ(prompt tokens − cached tokens) / Δ(prefilled requests);
//!
//! where, given the routing config's `attention_crossover_tokens`, the uncached tokens
//! count as the prefill work they are (`infergate_core::scoring::prefill_work_tokens`,
//! over the window's mean prompt): the rate learned is then the linear one the router's
//! cost model multiplies, not one that has already absorbed the attention of long
//! prompts. Past that,
//! - request rate = Δ(prefilled requests) / Δ(scrape time);
//! - slot hold = Δ(inference time sum) / Δ(inference time count): how long a request
//!   holds a batch slot, prefill and decode (vLLM's `request_inference_time_seconds`);
//!
//! and the pod's prefix-cache counters (lookups and hits, or prompt and cached tokens)
//! are passed on as they are: the router checks its prefix index against them.
//!
//! Deltas are taken over a window of about two seconds, not one scrape: a prefill's time
//! is counted when it ends, so a 100 ms interval would credit a 400 ms prefill to the
//! interval it ended in. A counter that goes down means the pod restarted: the deltas
//! start over.

use infergate_core::scoring::prefill_work_tokens;
use infergate_core::snapshot::PodSignals;

use crate::prefill_fit::PrefillFit;

/// Weight of the newest window.
const ALPHA: f64 = 0.2;
/// Span of the window the deltas are taken over, seconds.
const WINDOW_S: f64 = 2.0;

/// The cumulative counters an engine exposes, where it has them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    pub prompt_tokens: Option<f64>,
    pub cached_tokens: Option<f64>,
    /// Prefix-cache hits and lookups in one unit, blocks or tokens: read when
    /// `cached_tokens` is not known.
    pub prefix_hits: Option<f64>,
    pub prefix_queries: Option<f64>,
    /// Prompt tokens whose KV another pod computed and sent (a P/D decode pod's
    /// transfers, vLLM's `external_prefix_cache_hits`): counted in `prompt_tokens`, but
    /// not prefilled here. Without this, a decode pod's learned prefill rate is its
    /// transfers' (measured in the P/D bench: 0.3–3.4 M tokens/s against a true 40k).
    pub external_tokens: Option<f64>,
    pub prefill_seconds: Option<f64>,
    pub prefilled_requests: Option<f64>,
    pub itl_seconds: Option<f64>,
    pub itl_count: Option<f64>,
    /// Time finished requests spent running (prefill and decode), and how many.
    pub inference_seconds: Option<f64>,
    pub inference_requests: Option<f64>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Ewma(Option<f64>);

impl Ewma {
    fn update(&mut self, sample: f64) {
        if sample.is_finite() && sample > 0.0 {
            self.0 = Some(self.0.map_or(sample, |v| v + ALPHA * (sample - v)));
        }
    }
}

#[derive(Debug, Default)]
pub struct RateLearner {
    /// Recent samples, oldest first, spanning at most one window.
    history: std::collections::VecDeque<(Counters, f64)>,
    request_rate_per_s: Ewma,
    prefill_tokens_per_s: Ewma,
    decode_step_ms: Ewma,
    mean_prompt_tokens: Ewma,
    slot_hold_ms: Ewma,
    /// The newest counters seen.
    last: Option<Counters>,
    /// Where the current disjoint window of the overhead fit began.
    fit_from: Option<(Counters, f64)>,
    prefill_fit: PrefillFit,
    /// The routing config's `cost.attention_crossover_tokens`; 0 counts prefill work as
    /// plain tokens.
    attention_crossover_tokens: f64,
}

fn delta(now: Option<f64>, before: Option<f64>) -> Option<f64> {
    Some(now? - before?)
}

/// A histogram's mean over the window in milliseconds, from the deltas of its seconds
/// sum and its count; none when nothing was counted.
fn mean_ms(seconds: Option<f64>, count: Option<f64>) -> Option<f64> {
    let (seconds, count) = (seconds?, count?);
    (count > 0.0).then(|| 1000.0 * seconds / count)
}

/// Prompt tokens served from the prefix cache between two samples, of `prompt` in all;
/// 0 when the engine says nothing about its cache.
/// Transferred tokens (`Counters::external_tokens`) count as not prefilled here too.
fn cached(now: &Counters, before: &Counters, prompt: f64) -> f64 {
    let external = delta(now.external_tokens, before.external_tokens).unwrap_or(0.0).max(0.0);
    if let Some(cached) = delta(now.cached_tokens, before.cached_tokens) {
        return (cached + external).min(prompt.max(cached));
    }
    let local = match (delta(now.prefix_hits, before.prefix_hits), delta(now.prefix_queries, before.prefix_queries)) {
        (Some(hits), Some(queries)) if queries > 0.0 && hits >= 0.0 => prompt * (hits / queries).min(1.0),
        _ => 0.0,
    };
    (local + external).min(prompt.max(local))
}

impl RateLearner {
    /// Counts prefill work with `crossover_tokens` from the next observation on.
    pub fn count_attention(&mut self, crossover_tokens: f64) {
        self.attention_crossover_tokens = crossover_tokens;
    }

    /// The prefill work of a window's `requests`: `prompt` tokens of which `cached` hit.
    fn work(&self, prompt: f64, cached: f64, requests: Option<f64>) -> f64 {
        match requests.filter(|r| *r >= 1.0) {
            Some(n) => n * prefill_work_tokens(prompt / n, cached / n, self.attention_crossover_tokens),
            None => (prompt - cached).max(0.0),
        }
    }

    /// `at_s` is when the scrape was taken, in seconds on any fixed clock.
    pub fn observe(&mut self, now: Counters, at_s: f64) {
        while self.history.len() > 1 && self.history.get(1).is_some_and(|(_, t)| at_s - t >= WINDOW_S) {
            self.history.pop_front();
        }
        let oldest = self.history.front().copied();
        self.history.push_back((now, at_s));
        self.last = Some(now);
        let Some((before, before_s)) = oldest else { return };
        let restarted = [
            delta(now.prompt_tokens, before.prompt_tokens),
            delta(now.prefill_seconds, before.prefill_seconds),
            delta(now.itl_count, before.itl_count),
        ]
        .iter()
        .any(|d| d.is_some_and(|d| d < 0.0));
        if restarted {
            self.history.clear();
            self.history.push_back((now, at_s));
            self.fit_from = Some((now, at_s));
            return;
        }
        self.fit_window(now, at_s);
        let requests = delta(now.prefilled_requests, before.prefilled_requests);
        let uncached = delta(now.prompt_tokens, before.prompt_tokens)
            .map(|prompt| self.work(prompt, cached(&now, &before, prompt), requests));

        let elapsed = at_s - before_s;
        if let (Some(tokens), Some(seconds)) = (uncached, delta(now.prefill_seconds, before.prefill_seconds)) {
            let busy = if elapsed > 0.0 { seconds.min(elapsed) } else { seconds };
            if busy > 0.0 {
                self.prefill_tokens_per_s.update(tokens / busy);
            }
        }
        if let (Some(tokens), Some(requests)) = (uncached, requests) {
            if requests > 0.0 {
                self.mean_prompt_tokens.update(tokens / requests);
            }
        }
        if let Some(requests) = requests {
            if elapsed > 0.0 {
                // Zero is a valid rate here: an idle pod's rate decays towards it.
                let sample = requests / elapsed;
                self.request_rate_per_s.0 =
                    Some(self.request_rate_per_s.0.map_or(sample, |v| v + ALPHA * (sample - v)));
            }
        }
        if let Some(ms) = mean_ms(delta(now.itl_seconds, before.itl_seconds), delta(now.itl_count, before.itl_count)) {
            self.decode_step_ms.update(ms);
        }
        let inference_seconds = delta(now.inference_seconds, before.inference_seconds);
        if let Some(ms) = mean_ms(inference_seconds, delta(now.inference_requests, before.inference_requests)) {
            self.slot_hold_ms.update(ms);
        }
    }

    /// Closes the overhead fit's window once it spans [`WINDOW_S`]: disjoint windows,
    /// so that each prefill counts once.
    fn fit_window(&mut self, now: Counters, at_s: f64) {
        let Some((before, before_s)) = self.fit_from else {
            self.fit_from = Some((now, at_s));
            return;
        };
        let elapsed = at_s - before_s;
        if elapsed < WINDOW_S {
            return;
        }
        self.fit_from = Some((now, at_s));
        let prompt = delta(now.prompt_tokens, before.prompt_tokens);
        let window = (
            prompt,
            delta(now.prefilled_requests, before.prefilled_requests),
            delta(now.prefill_seconds, before.prefill_seconds),
        );
        if let (Some(prompt), Some(requests), Some(seconds)) = window {
            let work = self.work(prompt, cached(&now, &before, prompt), Some(requests));
            self.prefill_fit.observe(requests, work, seconds.min(elapsed));
        }
    }

    pub fn apply(&self, signals: &mut PodSignals) {
        signals.prefill_tokens_per_s = self.prefill_fit.rate().or(self.prefill_tokens_per_s.0);
        signals.decode_step_ms = self.decode_step_ms.0;
        signals.mean_prompt_tokens = self.mean_prompt_tokens.0;
        signals.request_rate_per_s = self.request_rate_per_s.0;
        signals.slot_hold_ms = self.slot_hold_ms.0;
        let counted = self.last.map(|c| match (c.prefix_queries, c.prefix_hits) {
            (Some(queries), Some(hits)) => (Some(queries), Some(hits)),
            _ => (c.prompt_tokens.filter(|_| c.cached_tokens.is_some()), c.cached_tokens),
        });
        (signals.prefix_cache_queries, signals.prefix_cache_hits) = counted.unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(prompt: f64, cached: f64, prefill_s: f64, requests: f64, itl_s: f64, itl_n: f64) -> Counters {
        Counters {
            prompt_tokens: Some(prompt),
            cached_tokens: Some(cached),
            prefix_hits: None,
            prefix_queries: None,
            external_tokens: None,
            prefill_seconds: Some(prefill_s),
            prefilled_requests: Some(requests),
            itl_seconds: Some(itl_s),
            itl_count: Some(itl_n),
            inference_seconds: None,
            inference_requests: None,
        }
    }

    #[test]
    fn the_pods_prefix_cache_counters_are_passed_on() {
        let mut learner = RateLearner::default();
        let mut s = PodSignals::default();
        learner.apply(&mut s);
        assert_eq!((s.prefix_cache_queries, s.prefix_cache_hits), (None, None), "nothing scraped yet");
        // vLLM: lookups and hits of its own.
        let vllm = Counters {
            prefix_queries: Some(900.0),
            prefix_hits: Some(300.0),
            ..counters(1_000.0, 0.0, 1.0, 2.0, 0.0, 0.0)
        };
        learner.observe(Counters { cached_tokens: None, ..vllm }, 0.0);
        learner.apply(&mut s);
        assert_eq!((s.prefix_cache_queries, s.prefix_cache_hits), (Some(900.0), Some(300.0)));
        // SGLang: prompt tokens and the cached ones among them.
        let mut sglang = RateLearner::default();
        sglang.observe(counters(1_000.0, 250.0, 1.0, 2.0, 0.0, 0.0), 0.0);
        sglang.apply(&mut s);
        assert_eq!((s.prefix_cache_queries, s.prefix_cache_hits), (Some(1_000.0), Some(250.0)));
    }

    #[test]
    fn long_prompts_count_their_attention_so_the_rate_stays_linear() {
        // One 100k-token cold prompt per 2 s window on a pod of 40,000 tokens/s of
        // matrix work whose attention makes the crossover 50,000 tokens: 2.5 s of
        // matrix work and 5 s of attention.
        let seconds = 100_000.0 / 40_000.0 * (1.0 + 100_000.0 / 50_000.0);
        let learn = |crossover: f64| {
            let mut learner = RateLearner::default();
            learner.count_attention(crossover);
            learner.observe(counters(0.0, 0.0, 0.0, 0.0, 0.0, 0.0), 0.0);
            learner.observe(counters(100_000.0, 0.0, seconds, 1.0, 0.0, 0.0), 10.0);
            let mut s = PodSignals::default();
            learner.apply(&mut s);
            (s.prefill_tokens_per_s.unwrap(), s.mean_prompt_tokens.unwrap())
        };
        let (rate, work) = learn(50_000.0);
        assert!((rate - 40_000.0).abs() < 1e-6, "the linear rate: {rate}");
        assert_eq!(work, 300_000.0, "the prefill work, in tokens at that rate");
        let (linear, _) = learn(0.0);
        assert!((linear - 40_000.0 / 3.0).abs() < 1e-6, "attention folded into the rate: {linear}");
    }

    #[test]
    fn rates_come_from_deltas_not_lifetime_totals() {
        let mut learner = RateLearner::default();
        learner.observe(counters(1_000_000.0, 0.0, 1000.0, 100.0, 100.0, 10_000.0), 0.0);
        // Next interval: 20,000 tokens (5,000 cached) in 1.5 s over 10 requests; 100 steps in 2 s.
        learner.observe(counters(1_020_000.0, 5_000.0, 1001.5, 110.0, 102.0, 10_100.0), 2.0);
        let mut s = PodSignals::default();
        learner.apply(&mut s);
        assert_eq!(s.prefill_tokens_per_s, Some(10_000.0));
        assert_eq!(s.mean_prompt_tokens, Some(1_500.0));
        assert!((s.decode_step_ms.unwrap() - 20.0).abs() < 1e-9);
        assert_eq!(s.request_rate_per_s, Some(5.0), "10 requests over 2 s");
    }

    #[test]
    fn transferred_prompts_are_not_counted_as_prefilled_here() {
        // A P/D decode pod: 20,000 prompt tokens in the interval, 18,000 of them moved in
        // from a prefill pod, 2,000 prefilled in 0.2 s.
        let mut learner = RateLearner::default();
        let decode = |prompt, external, prefill_s, requests| Counters {
            external_tokens: Some(external),
            ..counters(prompt, 0.0, prefill_s, requests, 1.0, 100.0)
        };
        learner.observe(decode(0.0, 0.0, 0.0, 0.0), 0.0);
        learner.observe(decode(20_000.0, 18_000.0, 0.2, 10.0), 2.0);
        let mut s = PodSignals::default();
        learner.apply(&mut s);
        assert_eq!(s.prefill_tokens_per_s, Some(10_000.0), "not 100,000");
        assert_eq!(s.mean_prompt_tokens, Some(200.0));
        assert_eq!(s.prefix_cache_hits, Some(0.0), "a transfer is no local prefix hit");
    }

    #[test]
    fn hits_counted_in_blocks_give_the_cached_share_of_the_prompt() {
        let blocks = |prompt, hits, queries, prefill_s, requests| Counters {
            cached_tokens: None,
            prefix_hits: Some(hits),
            prefix_queries: Some(queries),
            ..counters(prompt, 0.0, prefill_s, requests, 0.0, 0.0)
        };
        let mut learner = RateLearner::default();
        learner.observe(blocks(0.0, 0.0, 0.0, 0.0, 0.0), 0.0);
        // 20,000 prompt tokens, 1,250 blocks looked up of which 500 hit: 40% cached.
        learner.observe(blocks(20_000.0, 500.0, 1_250.0, 1.2, 10.0), 2.0);
        let mut s = PodSignals::default();
        learner.apply(&mut s);
        assert_eq!(s.prefill_tokens_per_s, Some(10_000.0), "12,000 uncached tokens in 1.2 s");
        assert_eq!(s.mean_prompt_tokens, Some(1_200.0));
    }

    #[test]
    fn overlapping_prefills_do_not_shrink_the_rate() {
        let mut learner = RateLearner::default();
        learner.observe(counters(0.0, 0.0, 0.0, 0.0, 0.0, 0.0), 0.0);
        // 8 requests prefilled concurrently: 8 s of summed prefill time within 1 s.
        learner.observe(counters(16_000.0, 0.0, 8.0, 8.0, 0.0, 0.0), 1.0);
        let mut s = PodSignals::default();
        learner.apply(&mut s);
        assert_eq!(s.prefill_tokens_per_s, Some(16_000.0));
    }

    #[test]
    fn deltas_span_the_window_not_one_scrape() {
        let mut learner = RateLearner::default();
        learner.observe(counters(0.0, 0.0, 0.0, 0.0, 0.0, 0.0), 0.0);
        // A 0.4 s prefill of 8,000 tokens ends in the fourth 100 ms interval.
        learner.observe(counters(0.0, 0.0, 0.0, 0.0, 0.0, 0.0), 0.1);
        learner.observe(counters(0.0, 0.0, 0.0, 0.0, 0.0, 0.0), 0.2);
        learner.observe(counters(8_000.0, 0.0, 0.4, 1.0, 0.0, 0.0), 0.4);
        let mut s = PodSignals::default();
        learner.apply(&mut s);
        assert_eq!(s.prefill_tokens_per_s, Some(20_000.0), "8,000 tokens over the 0.4 s the prefill took");
    }

    #[test]
    fn a_restart_does_not_produce_a_sample() {
        let mut learner = RateLearner::default();
        learner.observe(counters(1000.0, 0.0, 1.0, 10.0, 1.0, 100.0), 0.0);
        learner.observe(counters(10.0, 0.0, 0.1, 1.0, 0.1, 5.0), 1.0);
        let mut s = PodSignals::default();
        learner.apply(&mut s);
        assert_eq!(s.prefill_tokens_per_s, None);
    }

    #[test]
    fn a_pod_serving_cache_hits_is_not_taken_for_a_slow_one() {
        // vLLM on CPU: a cold 1,064-token prompt in 1.9 s, a 64-token one after a cached
        // 1,000-token prefix in 0.27 s; one request every 2 s window, then hits only.
        let mut learner = RateLearner::default();
        let (mut prompt, mut cached, mut prefill, mut requests) = (0.0, 0.0, 0.0, 0.0);
        learner.observe(counters(0.0, 0.0, 0.0, 0.0, 0.0, 0.0), 0.0);
        for window in 1..=30 {
            let cold = window % 3 == 1 && window < 10;
            prompt += 1_064.0;
            cached += if cold { 0.0 } else { 1_000.0 };
            prefill += if cold { 1.9 } else { 0.27 };
            requests += 1.0;
            learner.observe(counters(prompt, cached, prefill, requests, 0.0, 0.0), 2.0 * f64::from(window));
        }
        let mut s = PodSignals::default();
        learner.apply(&mut s);
        let rate = s.prefill_tokens_per_s.unwrap();
        // 1,000 more tokens took 1.63 s more: 613 tokens/s, where the last windows
        // alone say 64 / 0.27 = 237.
        assert!((rate - 1_000.0 / 1.63).abs() < 1.0, "{rate}");
    }

    #[test]
    fn the_average_moves_gradually() {
        let mut learner = RateLearner::default();
        learner.observe(counters(0.0, 0.0, 0.0, 0.0, 0.0, 0.0), 0.0);
        learner.observe(counters(100.0, 0.0, 0.01, 1.0, 0.01, 1.0), 2.0);
        learner.observe(counters(200.0, 0.0, 0.03, 2.0, 0.02, 2.0), 4.0);
        let mut s = PodSignals::default();
        learner.apply(&mut s);
        // 10,000 then 5,000 tokens/s: 10,000 + 0.2 × (5,000 − 10,000) = 9,000.
        assert!((s.prefill_tokens_per_s.unwrap() - 9_000.0).abs() < 1e-6);
    }

    #[test]
    fn a_slot_is_held_for_the_requests_prefill_and_decode() {
        let with_inference = |seconds, requests| Counters {
            inference_seconds: Some(seconds),
            inference_requests: Some(requests),
            ..counters(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        };
        let mut learner = RateLearner::default();
        learner.observe(with_inference(100.0, 10.0), 0.0);
        // 4 requests finished in the window, having run 18 s in all.
        learner.observe(with_inference(118.0, 14.0), 2.0);
        let mut s = PodSignals::default();
        learner.apply(&mut s);
        assert_eq!(s.slot_hold_ms, Some(4_500.0));
    }
}
