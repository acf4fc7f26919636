//! Each pool's characters per prompt token, learned from the engines' own `usage`.
//!
//! The gateway measures a prompt in characters; engines count tokens and size their KV
//! cache in tokens. `CHARS_PER_TOKEN` (4) is right for English prose, but a tokenizer
//! and a workload can be far from it: the prompts of inference-perf's `shared_prefix`
//! generator (random token ids, decoded) run at about 6.8 characters per SmolLM2 token.
//! With the fixed ratio the router then overestimated every prompt's tokens 1.7-fold,
//! and the prefix index, which holds a pod's KV capacity in hashed character blocks,
//! believed each pod held 1.7 times fewer prompts than it did: it forgot prefixes the
//! pods still cached and sent their next requests elsewhere.
//!
//! Every answer whose `usage` reports `prompt_tokens` gives one ratio, `prompt
//! characters / prompt tokens` (chat templates add tokens, so a chat pool learns the
//! ratio of what the gateway measures to what the engine counts, which is the one the
//! conversions need). The pool's ratio is the running mean of its first
//! [`WARM_UP`] answers, then an exponentially weighted mean; samples outside
//! [`MIN_RATIO`]..[`MAX_RATIO`] (a prompt too short to say, a template-only prompt)
//! are ignored. A pool not observed yet uses `CHARS_PER_TOKEN`.

use std::collections::HashMap;

use crate::wire::CHARS_PER_TOKEN;

/// Answers averaged with equal weight before the mean starts to forget.
pub const WARM_UP: u32 = 20;
/// Weight of each answer afterwards.
const ALPHA: f64 = 0.05;
const MIN_RATIO: f64 = 1.0;
const MAX_RATIO: f64 = 16.0;
/// Prompts with fewer tokens than this are mostly template.
const MIN_PROMPT_TOKENS: u64 = 32;

#[derive(Debug, Clone, Copy, PartialEq)]
struct PoolRatio {
    chars_per_token: f64,
    samples: u32,
}

/// Per-pool characters per token.
#[derive(Debug, Default)]
pub struct CharsPerToken {
    pools: HashMap<String, PoolRatio>,
}

impl CharsPerToken {
    /// The pool's ratio (`CHARS_PER_TOKEN` until observed).
    pub fn ratio(&self, pool: &str) -> f64 {
        self.pools.get(pool).map_or(CHARS_PER_TOKEN as f64, |p| p.chars_per_token)
    }

    /// How many answers of this pool have been counted.
    pub fn samples(&self, pool: &str) -> u32 {
        self.pools.get(pool).map_or(0, |p| p.samples)
    }

    /// An answer from `pool` reports `prompt_tokens` for a prompt of `prompt_chars`.
    /// Returns whether it was counted.
    pub fn observe(&mut self, pool: &str, prompt_chars: usize, prompt_tokens: u64) -> bool {
        if prompt_tokens < MIN_PROMPT_TOKENS {
            return false;
        }
        let sample = prompt_chars as f64 / prompt_tokens as f64;
        if !(MIN_RATIO..=MAX_RATIO).contains(&sample) {
            return false;
        }
        let entry = self.pools.entry(pool.to_string()).or_insert(PoolRatio { chars_per_token: sample, samples: 0 });
        entry.samples = entry.samples.saturating_add(1);
        let weight = if entry.samples <= WARM_UP { 1.0 / f64::from(entry.samples) } else { ALPHA };
        entry.chars_per_token += weight * (sample - entry.chars_per_token);
        true
    }

    /// Forgets pools no longer configured.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.pools.retain(|pool, _| keep(pool));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unobserved_pool_uses_the_default() {
        assert_eq!(CharsPerToken::default().ratio("a"), CHARS_PER_TOKEN as f64);
    }

    #[test]
    fn the_ratio_is_the_mean_of_the_first_answers_then_follows_slowly() {
        let mut ratios = CharsPerToken::default();
        assert!(ratios.observe("a", 6_800, 1_000));
        assert!(ratios.observe("a", 7_200, 1_000));
        assert!((ratios.ratio("a") - 7.0).abs() < 1e-9);
        for _ in 0..WARM_UP {
            ratios.observe("a", 7_000, 1_000);
        }
        ratios.observe("a", 4_000, 1_000);
        assert!((ratios.ratio("a") - 6.85).abs() < 0.01, "one odd answer moves it by 5%: {}", ratios.ratio("a"));
        assert_eq!(ratios.ratio("b"), CHARS_PER_TOKEN as f64, "pools learn apart");
    }

    #[test]
    fn answers_that_cannot_say_are_ignored() {
        let mut ratios = CharsPerToken::default();
        assert!(!ratios.observe("a", 100, 10), "too short");
        assert!(!ratios.observe("a", 100_000, 1_000), "100 characters a token is no tokenizer");
        assert!(!ratios.observe("a", 10, 1_000));
        assert_eq!((ratios.samples("a"), ratios.ratio("a")), (0, CHARS_PER_TOKEN as f64));
    }
}
