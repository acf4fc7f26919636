//! The work of a prefill, in tokens at a pod's linear prefill rate.
//!
//! Each prompt token attends to every token before it, cached ones included, so the
//! prefill of the tokens past a cached prefix `c` of a prompt of `L` costs
//! `(L − c) / rate` of matrix work and `k × (L² − c²) / 2` of attention. With `X` the
//! prompt length at which both parts are equal (`k = 2 / (rate × X)`), the whole is
//! `(L − c) × (1 + (L + c) / X)` tokens at the linear rate. For Llama-3.1-8B, `X` is
//! 53,000 tokens by the FLOP count; a 120k-token conversation's next turn of 6k new
//! tokens then costs 5.6 times its linear price, and a 128k cold prompt 3.5 times.
//! The router prices prefills this way, and the learners that measure a pod's rate
//! count the work they observe the same way, so that the two agree.

/// The prefill work of `prompt_tokens` past a cached prefix of `cached_tokens`, in
/// tokens at the linear rate; `crossover_tokens` of 0 (or not finite) prices it
/// linearly.
pub fn prefill_work_tokens(prompt_tokens: f64, cached_tokens: f64, crossover_tokens: f64) -> f64 {
    let own = (prompt_tokens - cached_tokens).max(0.0);
    if crossover_tokens.is_finite() && crossover_tokens > 0.0 {
        own * (1.0 + (prompt_tokens + cached_tokens).max(0.0) / crossover_tokens)
    } else {
        own
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_context_multiplies_the_linear_price() {
        assert_eq!(prefill_work_tokens(4_000.0, 0.0, 0.0), 4_000.0);
        assert_eq!(prefill_work_tokens(4_000.0, 0.0, 50_000.0), 4_320.0);
        let next_turn = prefill_work_tokens(126_000.0, 120_000.0, 53_000.0);
        assert!((next_turn / 6_000.0 - 5.64).abs() < 0.01, "{next_turn}");
        // Summed over chunks, the same as the whole: the attention terms telescope.
        let whole = prefill_work_tokens(100_000.0, 0.0, 50_000.0);
        let chunks = prefill_work_tokens(50_000.0, 0.0, 50_000.0) + prefill_work_tokens(100_000.0, 50_000.0, 50_000.0);
        assert!((whole - chunks).abs() < 1e-6);
    }
}
