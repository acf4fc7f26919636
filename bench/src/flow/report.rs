//! What the flow-control benchmark reports per gate: per class and per standard tenant,
//! TTFT percentiles and the share answered within target; refusals by reason; Jain's
//! fairness index among the standard tenants; goodput; the longest wait in the queue.

use std::collections::BTreeMap;

use infergate_core::config::Criticality;
use serde::Serialize;

use super::sim::FlowOutcome;
use super::workload::{Attack, NOISY, QUIET, Tag};

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GroupResult {
    pub offered: usize,
    /// Got a first token.
    pub served: usize,
    /// Got its first token within its TTFT target.
    pub within_target: usize,
    pub ttft_p50_ms: f64,
    pub ttft_p90_ms: f64,
    pub ttft_p99_ms: f64,
    /// The longest a request of the group was held before dispatch.
    pub max_queued_ms: f64,
    pub refused: BTreeMap<&'static str, usize>,
}

impl GroupResult {
    pub fn attainment(&self) -> f64 {
        if self.offered == 0 { 1.0 } else { self.within_target as f64 / self.offered as f64 }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct FlowResult {
    pub gate: String,
    pub classes: BTreeMap<&'static str, GroupResult>,
    /// The standard band's tenants.
    pub tenants: BTreeMap<&'static str, GroupResult>,
    /// Jain's index over the standard tenants' goodput, each divided by its max-min
    /// fair share of the standard band's total goodput given its demand: 1 when every
    /// tenant gets what max-min fairness would give it.
    pub jain_standard: f64,
    /// Requests answered within their TTFT target per second of the run.
    pub goodput_per_s: f64,
}

pub fn class_name(band: Criticality) -> &'static str {
    match band {
        Criticality::Critical => "critical",
        Criticality::Standard => "standard",
        Criticality::Sheddable => "sheddable",
    }
}

/// What the noisy tenant's attacks on a gateway's tenant fairness got it: one row per
/// attack, the noisy tenant's and the quiet tenants' requests within target.
pub fn attack_markdown(rows: &[(Attack, FlowResult)]) -> String {
    let mut out = String::from(
        "| the noisy tenant's attack | noisy: requests within target | its share of the standard band's | quiet tenants: within target, each | Jain, standard tenants |\n|---|--:|--:|---|--:|\n",
    );
    for (attack, result) in rows {
        let within = |tenant: &str| result.tenants.get(tenant).map_or(0, |g| g.within_target);
        let total: usize = result.tenants.values().map(|g| g.within_target).sum();
        let noisy = within(NOISY);
        let quiet: Vec<String> = QUIET.iter().map(|q| within(q).to_string()).collect();
        out.push_str(&format!(
            "| {} | {noisy} | {:.1}% | {} | {:.3} |\n",
            attack.describe(),
            100.0 * noisy as f64 / total.max(1) as f64,
            quiet.join(" / "),
            result.jain_standard
        ));
    }
    out
}

/// Nearest-rank percentile of sorted values; 0 for none.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted.get(rank - 1).copied().unwrap_or(0.0)
}

fn group<'a>(members: impl Iterator<Item = (&'a FlowOutcome, &'a Tag)>) -> GroupResult {
    let mut result = GroupResult::default();
    let mut ttfts = Vec::new();
    for (outcome, tag) in members.filter(|(o, _)| !o.not_sent) {
        result.offered += 1;
        if let Some(reason) = outcome.refused {
            *result.refused.entry(reason).or_default() += 1;
        }
        if let Some(ttft) = outcome.ttft_ms() {
            result.served += 1;
            ttfts.push(ttft);
            if ttft <= tag.ttft_target_ms {
                result.within_target += 1;
            }
        }
        result.max_queued_ms = result.max_queued_ms.max(outcome.queued_ms().unwrap_or(0.0));
    }
    ttfts.sort_by(f64::total_cmp);
    result.ttft_p50_ms = round1(percentile(&ttfts, 0.5));
    result.ttft_p90_ms = round1(percentile(&ttfts, 0.9));
    result.ttft_p99_ms = round1(percentile(&ttfts, 0.99));
    result.max_queued_ms = round1(result.max_queued_ms);
    result
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Max-min fair shares of `total` among demands: each gets its demand or an equal
/// split of what is left, whichever is less.
pub fn max_min_shares(demands: &[f64], total: f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by(|a, b| demands.get(*a).unwrap_or(&0.0).total_cmp(demands.get(*b).unwrap_or(&0.0)));
    let mut shares = vec![0.0; demands.len()];
    let mut left = total;
    for (k, &i) in order.iter().enumerate() {
        let even = left / (order.len() - k) as f64;
        let share = demands.get(i).copied().unwrap_or(0.0).min(even);
        if let Some(s) = shares.get_mut(i) {
            *s = share;
        }
        left -= share;
    }
    shares
}

/// Jain's index of `x`: (Σx)² / (n Σx²), 1 when all equal.
pub fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if squares == 0.0 { 1.0 } else { sum * sum / (x.len() as f64 * squares) }
}

pub fn summarize(gate: &str, outcomes: &[FlowOutcome], tags: &[Tag], duration_s: f64) -> FlowResult {
    let mut classes = BTreeMap::new();
    for band in [Criticality::Critical, Criticality::Standard, Criticality::Sheddable] {
        let members = outcomes.iter().zip(tags).filter(|(_, t)| t.band == band);
        classes.insert(class_name(band), group(members));
    }
    let mut names: Vec<&'static str> =
        tags.iter().filter(|t| t.band == Criticality::Standard).map(|t| t.tenant).collect();
    names.sort_unstable();
    names.dedup();
    let mut tenants = BTreeMap::new();
    for name in &names {
        let members = outcomes.iter().zip(tags).filter(|(_, t)| t.band == Criticality::Standard && t.tenant == *name);
        tenants.insert(*name, group(members));
    }
    let demands: Vec<f64> = tenants.values().map(|g| g.offered as f64).collect();
    let got: Vec<f64> = tenants.values().map(|g| g.within_target as f64).collect();
    let fair = max_min_shares(&demands, got.iter().sum());
    let normalized: Vec<f64> = got.iter().zip(&fair).map(|(g, f)| if *f > 0.0 { g / f } else { 1.0 }).collect();
    let within: usize = classes.values().map(|g| g.within_target).sum();
    FlowResult {
        gate: gate.to_string(),
        classes,
        tenants,
        jain_standard: (jain(&normalized) * 1000.0).round() / 1000.0,
        goodput_per_s: round1(within as f64 / duration_s.max(1e-9)),
    }
}

/// The tables for BENCHMARKS.md: classes, then standard tenants, then the summary.
pub fn markdown(results: &[FlowResult], unloaded_critical_p90_ms: f64) -> String {
    let mut out = String::new();
    out.push_str(
        "| gate | class | offered | served | within target | TTFT p50 | p90 | p99 | longest held | refused |\n",
    );
    out.push_str("|---|---|--:|--:|--:|--:|--:|--:|--:|---|\n");
    for r in results {
        for (class, g) in &r.classes {
            out.push_str(&row(&r.gate, class, g));
        }
    }
    out.push_str("\n| gate | standard tenant | offered | served | within target | TTFT p50 | p90 | p99 | longest held | refused |\n");
    out.push_str("|---|---|--:|--:|--:|--:|--:|--:|--:|---|\n");
    for r in results {
        for (tenant, g) in &r.tenants {
            out.push_str(&row(&r.gate, tenant, g));
        }
    }
    out.push_str(&format!(
        "\n| gate | critical TTFT p90 ÷ unloaded ({unloaded_critical_p90_ms:.0} ms) | Jain, standard tenants | goodput (req/s within target) |\n"
    ));
    out.push_str("|---|--:|--:|--:|\n");
    for r in results {
        let critical = r.classes.get("critical").map_or(0.0, |g| g.ttft_p90_ms);
        out.push_str(&format!(
            "| {} | {:.2} | {:.3} | {:.1} |\n",
            r.gate,
            critical / unloaded_critical_p90_ms.max(1e-9),
            r.jain_standard,
            r.goodput_per_s
        ));
    }
    out
}

fn row(gate: &str, group: &str, g: &GroupResult) -> String {
    let refused = if g.refused.is_empty() {
        "0".to_string()
    } else {
        g.refused.iter().map(|(k, v)| format!("{v} {k}")).collect::<Vec<_>>().join(", ")
    };
    format!(
        "| {gate} | {group} | {} | {} | {} ({:.0}%) | {:.0} | {:.0} | {:.0} | {:.0} | {refused} |\n",
        g.offered,
        g.served,
        g.within_target,
        g.attainment() * 100.0,
        g.ttft_p50_ms,
        g.ttft_p90_ms,
        g.ttft_p99_ms,
        g.max_queued_ms
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_min_gives_small_demands_in_full_and_splits_the_rest() {
        let shares = max_min_shares(&[1.0, 1.0, 1.0, 1.0, 5.0], 6.0);
        assert_eq!(shares, vec![1.0, 1.0, 1.0, 1.0, 2.0]);
        assert_eq!(max_min_shares(&[4.0, 4.0], 4.0), vec![2.0, 2.0]);
    }

    #[test]
    fn jain_is_one_when_fair_and_lower_when_quiet_tenants_pay_for_a_noisy_one() {
        assert!((jain(&[1.0, 1.0, 1.0]) - 1.0).abs() < 1e-12);
        // First come first served: everyone gets 6/9 of its demand, so the quiet
        // tenants get 0.67 of their fair share and the noisy one 1.67 of its.
        let fcfs = [0.667, 0.667, 0.667, 0.667, 1.667];
        assert!((jain(&fcfs) - 0.82).abs() < 0.01, "{}", jain(&fcfs));
    }

    #[test]
    fn a_group_counts_refusals_targets_and_waits() {
        let tag = Tag { tenant: "a", presented: None, band: Criticality::Standard, ttft_target_ms: 100.0 };
        let fast = FlowOutcome {
            arrival: 1.0,
            dispatched: Some(1.02),
            first_token: Some(1.05),
            finished: Some(2.0),
            refused: None,
            not_sent: false,
        };
        let slow = FlowOutcome { first_token: Some(1.5), dispatched: Some(1.4), ..fast };
        let refused = FlowOutcome { refused: Some("expired"), first_token: None, dispatched: None, ..fast };
        let tags = [tag.clone(), tag.clone(), tag];
        let r = summarize("g", &[fast, slow, refused], &tags, 1.0);
        let g = &r.tenants["a"];
        assert_eq!((g.offered, g.served, g.within_target), (3, 2, 1));
        assert_eq!(g.refused.get("expired"), Some(&1));
        assert_eq!(g.max_queued_ms, 400.0);
        assert_eq!(r.goodput_per_s, 1.0);
    }
}
