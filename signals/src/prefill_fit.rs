//! A pod's prefill rate with its per-request overhead taken out.
//!
//! The plain estimate, uncached tokens over prefill seconds, mixes two costs: a fixed
//! part per request (scheduling, the step's own overhead, attention over the cached
//! context) and a part per uncached token. A pod serving mostly cache hits then looks
//! slow: on vLLM 0.32 on CPU a 64-token prompt after a cached 1,000-token prefix takes
//! about 0.27 s (240 tokens/s) where a cold 1,064-token prompt takes 1.9 s (560
//! tokens/s). Routing on that estimate prices a cold prompt 2.4× higher on the pods
//! that cache well than on the pod that last prefilled a cold one, so new prefixes pile
//! onto that pod (BENCHMARKS.md part 3).
//!
//! So the prefill time of each disjoint window is fitted as
//! `requests × overhead + uncached_tokens / rate`, by least squares over exponentially
//! weighted windows. The two unknowns are told apart only when the windows' mixes
//! differ (some with cold prompts, some with hits); while they do not, the last rate
//! fitted when they did stands, and before any, the caller's plain estimate.

/// Weight of the newest window in the moments.
const ALPHA: f64 = 0.1;
/// How far from collinear the windows' (requests, tokens) must be, as
/// `1 − cos²` of the angle between them, for the fit to be trusted.
const MIN_INDEPENDENCE: f64 = 0.1;

/// Exponentially weighted second moments of the windows' requests `r`, uncached tokens
/// `u` and prefill seconds `t`.
#[derive(Debug, Default, Clone, Copy)]
pub struct PrefillFit {
    moments: Option<Moments>,
    /// The last rate the moments determined.
    fitted: Option<f64>,
}

#[derive(Debug, Clone, Copy)]
struct Moments {
    rr: f64,
    ru: f64,
    uu: f64,
    rt: f64,
    ut: f64,
}

impl Moments {
    fn of(r: f64, u: f64, t: f64) -> Self {
        Self { rr: r * r, ru: r * u, uu: u * u, rt: r * t, ut: u * t }
    }

    fn blend(&mut self, new: Self) {
        for (m, n) in [
            (&mut self.rr, new.rr),
            (&mut self.ru, new.ru),
            (&mut self.uu, new.uu),
            (&mut self.rt, new.rt),
            (&mut self.ut, new.ut),
        ] {
            *m += ALPHA * (n - *m);
        }
    }

    /// Tokens per second of prefill beyond the per-request overhead, when the windows
    /// tell the two apart; a negative overhead (concurrent prefills sharing the time)
    /// counts as none.
    fn rate(&self) -> Option<f64> {
        let det = self.rr * self.uu - self.ru * self.ru;
        if !(self.rr > 0.0 && self.uu > 0.0 && det >= MIN_INDEPENDENCE * self.rr * self.uu) {
            return None;
        }
        let overhead = (self.rt * self.uu - self.ut * self.ru) / det;
        let per_token = if overhead >= 0.0 { (self.rr * self.ut - self.ru * self.rt) / det } else { self.ut / self.uu };
        (per_token.is_finite() && per_token > 0.0).then(|| 1.0 / per_token)
    }
}

impl PrefillFit {
    /// One window: `requests` whose prefill ended in it, their `uncached_tokens`, and the
    /// `seconds` they took. Windows without a prefill say nothing and are skipped.
    pub fn observe(&mut self, requests: f64, uncached_tokens: f64, seconds: f64) {
        let usable = [requests, uncached_tokens, seconds].iter().all(|v| v.is_finite() && *v >= 0.0);
        if !usable || requests <= 0.0 || seconds <= 0.0 {
            return;
        }
        let new = Moments::of(requests, uncached_tokens, seconds);
        match &mut self.moments {
            Some(moments) => moments.blend(new),
            None => self.moments = Some(new),
        }
        if let Some(rate) = self.moments.and_then(|m| m.rate()) {
            self.fitted = Some(rate);
        }
    }

    /// The last rate fitted, if the windows ever told overhead and tokens apart.
    pub fn rate(&self) -> Option<f64> {
        self.fitted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Windows of one request each: 64 or 1,064 uncached tokens, 0.16 s of overhead and
    /// 600 tokens/s.
    fn window(fit: &mut PrefillFit, tokens: f64) {
        fit.observe(1.0, tokens, 0.16 + tokens / 600.0);
    }

    #[test]
    fn warm_and_cold_windows_give_the_rate_without_the_overhead() {
        let mut fit = PrefillFit::default();
        window(&mut fit, 1_064.0);
        assert_eq!(fit.rate(), None, "one kind of window cannot separate the two");
        for _ in 0..5 {
            window(&mut fit, 64.0);
        }
        let rate = fit.rate().unwrap();
        assert!((rate - 600.0).abs() < 1e-6, "{rate}");
    }

    #[test]
    fn the_rate_stands_while_only_hits_come() {
        let mut fit = PrefillFit::default();
        window(&mut fit, 1_064.0);
        window(&mut fit, 64.0);
        for _ in 0..200 {
            // Hits only, on a pod that got slower per token: nothing separates the
            // overhead from the tokens any more.
            fit.observe(1.0, 64.0, 0.16 + 64.0 / 300.0);
        }
        let rate = fit.rate().unwrap();
        assert!(rate > 500.0, "kept the rate the mixed windows gave, not 64 tokens / 0.37 s: {rate}");
    }

    #[test]
    fn proportional_prefills_give_their_rate() {
        let mut fit = PrefillFit::default();
        for tokens in [1_000.0, 4_000.0, 2_000.0, 500.0] {
            fit.observe(1.0, tokens, tokens / 10_000.0);
        }
        assert!((fit.rate().unwrap() - 10_000.0).abs() < 1e-6);
    }

    #[test]
    fn empty_and_broken_windows_are_skipped() {
        let mut fit = PrefillFit::default();
        fit.observe(0.0, 0.0, 0.0);
        fit.observe(1.0, f64::NAN, 1.0);
        fit.observe(1.0, 100.0, -1.0);
        assert!(fit.moments.is_none());
    }
}
