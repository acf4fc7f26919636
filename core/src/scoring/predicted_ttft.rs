//! The default cost: the time to first token this request would see on a pod, in
//! milliseconds, from the pod's own learned speeds.
//!
//! ```text
//! rate, step   = learned prefill_tokens_per_s / factor, decode_step_ms × factor
//! ahead        = max(waiting × mean_prompt_tokens, pending_prefill_tokens)
//! queue_ms     = max(1000 × ahead / rate, kv_wait_ms)
//! own          = (prompt_tokens − cached) × (1 + (prompt_tokens + cached) / crossover)
//! ttft_ms      = queue_ms + 1000 × own / rate + step
//!              + adapter_load_ms + unknown_pod_penalty_ms
//! hold         = learned slot_hold_ms, else output_tokens × step
//! kv_wait_ms   = (waiting + 1) × hold / max(running, 1)
//!                only when our uncached tokens do not fit the pod's free KV cache
//! utilization  = min(request_rate × mean_prompt_tokens / rate, 0.9)
//! impact_ms    = 1000 × request_rate × own_prefill_s² / (1 − utilization)
//!                only for a pod that would copy a prefix another pod owns
//! resident     = max(kv_cache_usage, held_share), held_share only for a pod that
//!                does not own the prompt's prefix
//! resident_ms  = RESIDENT_WEIGHT × resident × 1000 × prompt_tokens / rate
//! evict_ms     = 1000 × max(0, uncached_blocks − prefix_room_blocks) × tokens_per_block / rate
//!                only for a prompt no pod really holds
//! cost_ms      = ttft_ms + impact_ms + resident_ms + evict_ms
//! ```
//!
//! `own` is the prefill's work in tokens at the pod's linear rate (`prefill_work.rs`):
//! each token attends to every one before it, so past `cost.attention_crossover_tokens`
//! (50,000 by default) attention costs more than the matrix work. The pending prefill a
//! gateway counts on a pod, and the mean prompt the agent learns, are in the same unit.
//! Without it the trace replay's long prompts (to 126k tokens) were priced at a third of
//! their cost, and requests queued behind them (quick suite, trace-replay TTFT p90 at
//! 1/1.5/2/2.5×: 1.38/1.55/1.78/1.88 s linear, 1.33/1.38/1.60/1.64 s with it).
//!
//! `factor` is the pool's learned ratio of observed to predicted TTFT
//! (`router::calibration`): speeds read from the pods' histograms are corrected by
//! what their first tokens took.
//!
//! A pod whose free KV cache cannot take our prompt admits it only when running
//! requests finish and free theirs: with `running` requests each holding its slot for
//! `hold` (prefill and decode, as the pod's counters say, or `output_tokens` steps),
//! one finishes every `hold / running` on average, and the `waiting` requests ahead of
//! ours take the first ones. This replaces a hard KV threshold, which, between two
//! scrapes, sends every request to the one pod still under it, however long its queue.
//! The learned hold matters where answers are short: part 3's real vLLM pods answer 32
//! tokens at about 100 ms a step, so a slot is held for 32 steps and a prefill, not
//! for the 256 default steps (25.6 s) assumed before (BENCHMARKS.md part 3: TTFT p90 at
//! 2 req/s 2,198 → 1,394 ms in one run each).
//!
//! The same wait applies to a pod whose batch slots (`--max-num-seqs`) are all taken,
//! with the KV cache not full. Pricing it (with the limit configured per pool) was
//! measured and dropped: on part 3's pods, 4 slots each on shared CPUs, it moved
//! requests off their prefix's pod whenever a slot was seconds away, and the copies'
//! cold prefills cost every pod more than the waits they avoided (TTFT p90 6.3 s
//! against 1.4 s, prefix hit rate 44.5% against 72.8%).
//!
//! The prefill work ahead of ours (FCFS) is what the pod reports waiting, or, when more,
//! the uncached tokens this gateway sent that have not had their first token yet: a
//! request the scrape shows as running may still be prefilling. The learned prefill
//! rate is the pod's effective one, with its decoding batch interleaved; our first token
//! comes one step after our prefill. A prefix match shortens only our own prefill.
//!
//! `impact_ms` is the delay our prefill imposes on the others, as in an M/G/1 queue: the
//! requests that reach the pod before the extra work is absorbed (`request_rate ×
//! own_prefill_s / (1 − utilization)`) each wait `own_prefill_s` longer. It is
//! negligible at light load, and under load it is what keeps a re-prefill of a prefix
//! another pod holds (and the second copy it creates, which evicts other prefixes) from
//! looking cheaper than a short wait on the owner. It is charged to copies only: a
//! prompt nobody holds must be prefilled somewhere, and charging it there steered new
//! prefixes by each pod's learned request rate, a signal seconds old, onto whichever
//! pod it lagged on (shared-prefix at 20 req/s: TTFT p90 838 ms with it, 496 without).
//!
//! `resident_ms` weighs what the queue does not show: the work already resident on the
//! pod. Its KV use is the context of the requests it is decoding; at equal queues, the
//! emptier pod prefills ours among fewer decoding requests and keeps our blocks longer
//! before evicting them, and a prefix group placed there has room to grow. A full
//! cache counts as [`RESIDENT_WEIGHT`] times the request's whole prefill; unknown use
//! counts as half full. It is not part of the predicted TTFT.
//!
//! KV use counts only running requests' blocks: a pod whose cache holds twenty idle
//! agent sessions between their turns shows as empty. So the share of its prefix
//! capacity that prefixes in use hold (blocks a later request matched, as this router's
//! index counts them) is resident too, for any pod that would add the prompt beside
//! them: a new session goes where fewer live sessions would be evicted by its growth.
//! The owner of the prompt's prefix does not pay its own. Measured on the quick suite
//! (seed 42, 2026-12-07), against KV use alone: agentic TTFT mean at 16/32/64
//! sessions 1,477/1,269/5,252 → 1,243/1,177/5,152 ms (p90 at 8 sessions 691 → 722 ms);
//! trace-replay TTFT p90 at 1/1.5/2/2.5× 1,309/1,378/1,556/1,767 →
//! 1,289/1,356/1,445/1,648 ms; no other workload moved by more than 1%. Counting it
//! on owners too was worse (agentic p90 at 32: 2,222 ms).
//! The throughput profile adds
//! the decode of our expected output, `output_tokens × decode_step_ms`, so that batch
//! work goes where it finishes first.
//!
//! `evict_ms` places new prefixes where the prefix caches have room for them. A prompt
//! no pod holds is cached wherever it goes; where the cache is full of prefixes in use
//! (blocks a later request matched, as this router's index counts them; old prompts'
//! tails evict for free) its blocks evict some, which their next requests must prefill
//! again: about as much work as ours. Without it, where new prefixes went followed the
//! noise in the pods' learned speeds and loads: in part 3's first 30 s on three real
//! vLLM pods (BENCHMARKS.md), 9 of the first 12 prefix groups went to the pod whose
//! learned prefill rate was highest, whose index then forgot a group 14 s after its
//! first request, and that group's next request started a second copy elsewhere. A
//! prompt with a real owner is left to the owner rules (`prefix_affinity`).

use super::prefix_affinity::{has_real_owner, is_prefix_owner};
use super::{AdapterState, Candidate, RequestShape};
use crate::config::{CostDefaults, Profile};

/// The cost and its parts, for the decision header.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TtftBreakdown {
    pub queue_ms: f64,
    /// Wait for the KV cache to free room for our prompt (already in `queue_ms`).
    pub kv_wait_ms: f64,
    pub prefill_ms: f64,
    /// One decode step of the pod (`prefill_ms` ends with one), scaled by the TTFT
    /// calibration as the rest of the prediction.
    pub step_ms: f64,
    /// The pod's learned mean step unscaled: the gap its running requests see between
    /// tokens. The TTFT calibration corrects predicted first tokens, which queue; it
    /// would overstate the gaps (agentic sessions: 28 ms predicted where the requests'
    /// ITL p90 was 15 ms).
    pub itl_ms: f64,
    pub adapter_ms: f64,
    pub decode_ms: f64,
    pub penalty_ms: f64,
    /// Delay imposed on the pod's other requests (not part of this request's TTFT).
    pub impact_ms: f64,
    /// The weight of the work resident on the pod (not part of this request's TTFT).
    pub resident_ms: f64,
    /// The re-prefill of what our blocks evict from a full prefix cache (not part of
    /// this request's TTFT).
    pub evict_ms: f64,
    /// This request's predicted time to first token.
    pub ttft_ms: f64,
    /// What the ranking minimizes: `ttft_ms + impact_ms + resident_ms + evict_ms (+ decode_ms)`.
    pub total_ms: f64,
}

/// A full KV cache weighs this many times the request's whole prefill. Measured on the
/// quick suite: 1.5–3 alike (bursty-chat TTFT p90 44–47 ms, shared-prefix at 60 req/s
/// 3.4–3.7 s, against 50.3 ms and 3.74 s without the term); 4 was worse on
/// shared-prefix.
pub const RESIDENT_WEIGHT: f64 = 2.0;

/// KV-cache use above which a pod whose cache size is unknown counts as full.
const KV_FULL_USAGE: f64 = 0.95;

fn positive(value: Option<f64>, fallback: f64) -> f64 {
    value.filter(|v| v.is_finite() && *v > 0.0).unwrap_or(fallback)
}

pub fn predicted_ttft(c: &Candidate, shape: &RequestShape, defaults: &CostDefaults, profile: Profile) -> TtftBreakdown {
    let factor = positive(Some(c.ttft_factor), 1.0);
    let rate = positive(c.learned.prefill_tokens_per_s, defaults.prefill_tokens_per_s) / factor;
    let itl_ms = positive(c.learned.decode_step_ms, defaults.decode_step_ms);
    let step_ms = itl_ms * factor;
    let mean_prompt = positive(c.learned.mean_prompt_tokens, defaults.mean_prompt_tokens);
    let waiting = if c.waiting.is_finite() { c.waiting.max(0.0) } else { f64::MAX / 4.0 };
    let cached = shape.cached_tokens(c.matched_blocks);
    let own = defaults.prefill_work_tokens(shape.prompt_tokens, cached).max(1.0);
    let pending = if c.pending_prefill_tokens.is_finite() { c.pending_prefill_tokens.max(0.0) } else { 0.0 };
    let ahead = (waiting * mean_prompt).max(pending);
    let hold_ms = positive(c.learned.slot_hold_ms, defaults.output_tokens * step_ms);
    let kv_wait_ms = kv_wait_ms(c, own, pending, waiting, hold_ms);
    let queue_ms = (1000.0 * ahead / rate).max(kv_wait_ms);
    let prefill_ms = 1000.0 * own / rate + step_ms;
    let adapter_ms = match c.adapter {
        AdapterState::NotNeeded | AdapterState::Running => 0.0,
        AdapterState::Waiting => defaults.lora_load_ms / 2.0,
        AdapterState::FreeSlot | AdapterState::Unknown => defaults.lora_load_ms,
        // A running request must finish first: on average half an answer of decoding.
        AdapterState::Freeing => 2.0 * defaults.lora_load_ms + step_ms * defaults.output_tokens / 2.0,
        // Nothing frees a slot while the resident (or claiming) adapters' requests keep coming.
        AdapterState::Blocked => 2.0 * defaults.lora_load_ms + step_ms * defaults.output_tokens,
        // Each request it adds holds the slot an adapter waits for about half an answer more.
        AdapterState::Surplus => step_ms * defaults.output_tokens / 2.0,
        // A second copy where slots are scarce: the wait it will cause another adapter.
        AdapterState::Duplicate => defaults.lora_load_ms + step_ms * defaults.output_tokens / 2.0,
    };
    let decode_ms = match profile {
        Profile::Latency => 0.0,
        Profile::Throughput => shape.output_tokens * step_ms,
    };
    let penalty_ms = if c.has_metrics { 0.0 } else { defaults.unknown_pod_penalty_ms };
    let own_prefill_s = own / rate;
    // Only a copy pays for the delay it imposes: see the module doc.
    let copies_prefix = shape.best_matched_blocks > 0 && !is_prefix_owner(c.matched_blocks, shape.best_matched_blocks);
    let impact_ms = if !copies_prefix {
        0.0
    } else {
        let arrivals = c.learned.request_rate_per_s.filter(|r| r.is_finite() && *r > 0.0).unwrap_or(0.0);
        let utilization = (arrivals * mean_prompt / rate).min(0.9);
        1000.0 * arrivals * own_prefill_s * own_prefill_s / (1.0 - utilization)
    };
    let ttft_ms = queue_ms + prefill_ms + adapter_ms + penalty_ms;
    let usage = c.kv_cache_usage.filter(|u| u.is_finite()).map_or(0.5, |u| u.clamp(0.0, 1.0));
    // Prefixes in use count as resident on a pod that would add ours beside them.
    let owns_prompt = has_real_owner(shape) && is_prefix_owner(c.matched_blocks, shape.best_matched_blocks);
    let held = if owns_prompt || !c.prefix_held_share.is_finite() { 0.0 } else { c.prefix_held_share.clamp(0.0, 1.0) };
    let usage = usage.max(held);
    let resident_ms = RESIDENT_WEIGHT * usage * 1000.0 * shape.prompt_tokens.max(0.0) / rate;
    let evict_ms = if has_real_owner(shape) {
        0.0
    } else {
        let uncached = c.total_blocks.saturating_sub(c.matched_blocks) as f64;
        let room = if c.prefix_room_blocks.is_nan() { f64::INFINITY } else { c.prefix_room_blocks.max(0.0) };
        1000.0 * (uncached - room).max(0.0) * shape.tokens_per_block / rate
    };
    TtftBreakdown {
        queue_ms,
        kv_wait_ms,
        prefill_ms,
        step_ms,
        itl_ms,
        adapter_ms,
        decode_ms,
        penalty_ms,
        impact_ms,
        resident_ms,
        evict_ms,
        ttft_ms,
        total_ms: ttft_ms + impact_ms + resident_ms + evict_ms + decode_ms,
    }
}

/// The wait for running requests to free KV room for `own` more tokens; 0 when the
/// pod's free cache, less the prefill this gateway has sent it, holds them. Without a
/// known size, a use above the threshold counts as full.
fn kv_wait_ms(c: &Candidate, own: f64, pending: f64, waiting: f64, hold_ms: f64) -> f64 {
    let full = match (c.kv_free_tokens, c.kv_cache_usage) {
        (Some(free), _) => free.is_finite() && own > free - pending,
        (None, Some(usage)) => usage > KV_FULL_USAGE || usage.is_nan(),
        (None, None) => false,
    };
    if !full {
        return 0.0;
    }
    let running = if c.running.is_finite() { c.running.max(1.0) } else { 1.0 };
    (waiting + 1.0) * hold_ms / running
}

#[cfg(test)]
mod tests {
    use super::super::candidate;
    use super::*;

    fn shape(prompt_tokens: f64) -> RequestShape {
        RequestShape { prompt_tokens, tokens_per_block: 16.0, output_tokens: 100.0, best_matched_blocks: 0 }
    }

    /// Linear prefill, so that the sums below are plain.
    fn linear() -> CostDefaults {
        CostDefaults { attention_crossover_tokens: 0.0, ..CostDefaults::default() }
    }

    fn cost(c: &Candidate, prompt: f64) -> f64 {
        predicted_ttft(c, &shape(prompt), &linear(), Profile::Latency).total_ms
    }

    #[test]
    fn a_long_prompts_prefill_costs_its_attention() {
        let c = candidate(1, 0.0, 0.0, Some(0.0));
        let prefill = |prompt: f64, cached_blocks: usize, defaults: &CostDefaults| {
            let mut c = c;
            c.matched_blocks = cached_blocks;
            predicted_ttft(&c, &shape(prompt), defaults, Profile::Latency).prefill_ms - 20.0
        };
        // 6,000 new tokens after 114,000 cached: 600 ms linear, 5.7 times that with
        // attention, over a context of 117,000 tokens on average.
        let attention = CostDefaults::default();
        assert!((prefill(120_000.0, 7_125, &linear()) - 600.0).abs() < 1e-6);
        assert!((prefill(120_000.0, 7_125, &attention) - 600.0 * (1.0 + 234_000.0 / 50_000.0)).abs() < 1e-6);
        // Short prompts barely change: 1,000 tokens cost 2% more.
        assert!((prefill(1_000.0, 0, &attention) - 102.0).abs() < 1e-6);
    }

    #[test]
    fn an_idle_pod_costs_its_own_prefill_and_one_step() {
        let c = candidate(1, 0.0, 0.0, Some(0.0));
        // 1,000 tokens at 10,000 tokens/s = 100 ms, plus one 20 ms step.
        assert!((cost(&c, 1000.0) - 120.0).abs() < 1e-9);
    }

    #[test]
    fn the_ttft_calibration_scales_the_step_but_not_the_pods_own_gaps() {
        let mut c = candidate(1, 0.0, 0.0, Some(0.0));
        c.ttft_factor = 3.0;
        let t = predicted_ttft(&c, &shape(1000.0), &linear(), Profile::Latency);
        assert!((t.step_ms - 60.0).abs() < 1e-9, "{t:?}");
        assert!((t.itl_ms - 20.0).abs() < 1e-9, "{t:?}");
    }

    #[test]
    fn each_queued_request_adds_its_prefill() {
        let idle = candidate(1, 0.0, 0.0, None);
        let queued = candidate(2, 4.0, 0.0, None);
        // 4 × 512 tokens ahead at 10,000 tokens/s = 204.8 ms more.
        assert!((cost(&queued, 1000.0) - cost(&idle, 1000.0) - 204.8).abs() < 1e-6);
    }

    #[test]
    fn prefill_still_pending_counts_even_when_the_scrape_shows_no_queue() {
        let idle = candidate(1, 0.0, 1.0, None);
        let mut busy = candidate(2, 0.0, 1.0, None);
        busy.pending_prefill_tokens = 7_000.0;
        assert!((cost(&busy, 1000.0) - cost(&idle, 1000.0) - 700.0).abs() < 1e-6);
    }

    #[test]
    fn a_prefix_match_cuts_only_our_prefill() {
        let mut warm = candidate(1, 0.0, 0.0, None);
        warm.matched_blocks = 50;
        warm.total_blocks = 60;
        let cold = candidate(2, 0.0, 0.0, None);
        // 800 of 1,000 tokens cached: 80 ms less.
        assert!((cost(&cold, 1000.0) - cost(&warm, 1000.0) - 80.0).abs() < 1e-6);
    }

    #[test]
    fn a_loaded_prefix_holder_loses_to_an_idle_pod_when_its_queue_costs_more() {
        let mut owner = candidate(1, 10.0, 8.0, None);
        owner.matched_blocks = 60;
        owner.total_blocks = 63;
        let idle = candidate(2, 0.0, 0.0, None);
        assert!(cost(&idle, 1000.0) < cost(&owner, 1000.0), "spill to the idle pod");
        let lightly = candidate(3, 1.0, 1.0, None);
        let mut light_owner = lightly;
        light_owner.matched_blocks = 60;
        light_owner.total_blocks = 63;
        assert!(cost(&light_owner, 4000.0) < cost(&idle, 4000.0), "stay when the queue is short");
    }

    #[test]
    fn adapter_state_orders_the_cost_and_learned_rates_win() {
        let mut c = candidate(1, 0.0, 0.0, None);
        let mut last = -1.0;
        for state in [
            AdapterState::Running,
            AdapterState::Waiting,
            AdapterState::FreeSlot,
            AdapterState::Surplus,
            AdapterState::Duplicate,
            AdapterState::Freeing,
            AdapterState::Blocked,
        ] {
            c.adapter = state;
            let now = cost(&c, 100.0);
            assert!(now > last, "{state:?}");
            last = now;
        }
        let mut fast = candidate(2, 0.0, 0.0, None);
        fast.learned.prefill_tokens_per_s = Some(40_000.0);
        assert!(cost(&fast, 4000.0) < cost(&candidate(3, 0.0, 0.0, None), 4000.0));
    }

    #[test]
    fn throughput_profile_adds_the_decode_of_the_output() {
        let c = candidate(1, 0.0, 0.0, None);
        let latency = predicted_ttft(&c, &shape(100.0), &CostDefaults::default(), Profile::Latency);
        let throughput = predicted_ttft(&c, &shape(100.0), &CostDefaults::default(), Profile::Throughput);
        assert!((throughput.total_ms - latency.total_ms - 100.0 * 20.0).abs() < 1e-9);
    }

    #[test]
    fn under_load_a_cold_prefill_costs_the_others_more_than_a_short_wait() {
        let mut owner = candidate(1, 0.0, 0.0, None);
        owner.pending_prefill_tokens = 8_000.0;
        owner.matched_blocks = 375; // 6,000 of 7,200 tokens cached
        owner.total_blocks = 450;
        let cold = candidate(2, 0.0, 0.0, None);
        assert!(cost(&cold, 7_200.0) < cost(&owner, 7_200.0), "idle fleet: re-prefill elsewhere");
        owner.learned.request_rate_per_s = Some(8.0);
        let mut busy_cold = cold;
        busy_cold.learned.request_rate_per_s = Some(8.0);
        let owned = RequestShape { best_matched_blocks: 375, ..shape(7_200.0) };
        let cost_owned = |c: &Candidate| predicted_ttft(c, &owned, &CostDefaults::default(), Profile::Latency).total_ms;
        assert!(cost_owned(&owner) < cost_owned(&busy_cold), "8 req/s: stay with the prefix");
        assert!(cost(&busy_cold, 7_200.0) < cost(&owner, 7_200.0), "a prompt nobody holds pays no impact");
    }

    #[test]
    fn live_prefixes_weigh_on_a_pod_that_does_not_own_the_prompt() {
        let mut crowded = candidate(1, 0.0, 0.0, Some(0.0));
        crowded.prefix_held_share = 0.8;
        let roomy = candidate(2, 0.0, 0.0, Some(0.0));
        let new = |c: &Candidate| predicted_ttft(c, &shape(2_000.0), &CostDefaults::default(), Profile::Latency);
        // 2,000 tokens at 10,000 tokens/s: 200 ms of prefill, twice over at 0.8.
        assert!((new(&crowded).resident_ms - 0.8 * 400.0).abs() < 1e-9);
        assert_eq!(new(&roomy).resident_ms, 0.0);
        assert_eq!(new(&crowded).ttft_ms, new(&roomy).ttft_ms);
        // The owner of the prompt's prefix does not pay for its own sessions.
        crowded.matched_blocks = 100;
        let owned = RequestShape { best_matched_blocks: 100, ..shape(2_000.0) };
        let kept = predicted_ttft(&crowded, &owned, &CostDefaults::default(), Profile::Latency);
        assert_eq!(kept.resident_ms, 0.0);
        // A KV use above the held share still counts.
        crowded.kv_cache_usage = Some(0.9);
        assert!((new(&crowded).resident_ms - 0.9 * 400.0).abs() < 1e-9);
    }

    #[test]
    fn at_equal_queues_the_emptier_cache_wins_without_changing_the_predicted_ttft() {
        let full = candidate(1, 0.0, 0.0, Some(0.9));
        let empty = candidate(2, 0.0, 0.0, Some(0.0));
        let (full, empty) = [full, empty]
            .map(|c| predicted_ttft(&c, &shape(2_000.0), &CostDefaults::default(), Profile::Latency))
            .into();
        assert_eq!(full.ttft_ms, empty.ttft_ms);
        // 2,000 tokens at 10,000 tokens/s: 200 ms of prefill, twice over when full.
        assert!((full.resident_ms - 0.9 * 400.0).abs() < 1e-9 && empty.resident_ms == 0.0);
        assert!(full.total_ms > empty.total_ms);
    }

    #[test]
    fn a_new_prompt_pays_for_what_it_evicts_from_a_full_prefix_cache() {
        // 1,600 tokens in 100 blocks of 16; 10,000 tokens/s.
        let new_prompt = |room: f64| {
            let mut c = candidate(1, 0.0, 0.0, Some(0.0));
            c.total_blocks = 100;
            c.prefix_room_blocks = room;
            predicted_ttft(&c, &shape(1_600.0), &CostDefaults::default(), Profile::Latency)
        };
        assert_eq!(new_prompt(f64::INFINITY).evict_ms, 0.0);
        assert_eq!(new_prompt(100.0).evict_ms, 0.0, "room for every block");
        // 60 blocks of others' evicted: 960 tokens to prefill again, 96 ms.
        let full = new_prompt(40.0);
        assert!((full.evict_ms - 96.0).abs() < 1e-9);
        assert_eq!(full.ttft_ms, new_prompt(100.0).ttft_ms, "not part of the predicted TTFT");
        assert!((new_prompt(0.0).evict_ms - 160.0).abs() < 1e-9);
        assert_eq!(new_prompt(f64::NAN).evict_ms, 0.0);
    }

    #[test]
    fn a_prompt_with_a_real_owner_is_left_to_the_owner_rules() {
        let mut copy = candidate(1, 0.0, 0.0, Some(0.0));
        copy.total_blocks = 100;
        copy.prefix_room_blocks = 0.0;
        let owned = RequestShape { best_matched_blocks: 90, ..shape(1_600.0) };
        assert_eq!(predicted_ttft(&copy, &owned, &CostDefaults::default(), Profile::Latency).evict_ms, 0.0);
    }

    #[test]
    fn unknown_pods_pay_a_penalty_and_nan_waiting_is_worst() {
        let mut unknown = candidate(1, 0.0, 0.0, None);
        unknown.has_metrics = false;
        assert!(cost(&unknown, 100.0) > cost(&candidate(2, 0.0, 0.0, None), 100.0));
        let nan = candidate(3, f64::NAN, 0.0, None);
        assert!(cost(&nan, 100.0) > cost(&candidate(4, 1000.0, 0.0, None), 100.0));
    }

    #[test]
    fn a_full_cache_frees_room_as_fast_as_the_pods_requests_end() {
        // 4 running, 1 waiting, a full cache: two must finish before ours fits.
        let full = |hold_ms: Option<f64>| {
            let mut c = candidate(1, 1.0, 4.0, Some(0.99));
            c.learned.slot_hold_ms = hold_ms;
            predicted_ttft(&c, &shape(1_000.0), &CostDefaults::default(), Profile::Latency).kv_wait_ms
        };
        assert!((full(Some(4_000.0)) - 2.0 * 4_000.0 / 4.0).abs() < 1e-9, "the pod's own requests run 4 s");
        // Not learned: 256 default steps of 20 ms each.
        assert!((full(None) - 2.0 * 256.0 * 20.0 / 4.0).abs() < 1e-9);
    }
}
