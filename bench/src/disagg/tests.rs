//! The P/D simulator's timing (a split's TTFT, the link's queue, the prefill pods'
//! queue), its roles (a prefill pod never decodes) and its policies' splits.

use infergate_core::config::{PodRole, SplitPolicy};
use infergate_model_sim::engine::EngineProfile;

use super::*;
use crate::request::{Arrival, BenchRequest, text};
use crate::workloads::{BASE_MODEL, CalibrationPlan, Scenario};

/// The linear profile: a step's time is exactly `step_seconds`.
const PROFILE: EngineProfile = EngineProfile::LLAMA_3_1_8B_H100;
const LINK: Link = Link { kv_bytes_per_token: 131_072, gb_per_s: 25.0 };

/// A request of exactly `tokens` prompt tokens (4 bytes each) at `at`.
fn request(seed: u64, tokens: usize, output: u32, at: f64) -> BenchRequest {
    BenchRequest {
        arrival: Arrival::At(at),
        model: BASE_MODEL.into(),
        adapter: None,
        prompt: text(&mut fastrand::Rng::with_seed(seed), tokens * 4).into_bytes().into(),
        output_tokens: output,
        session: None,
    }
}

fn scenario(pods: usize, requests: Vec<BenchRequest>) -> Scenario {
    Scenario {
        pods,
        profile: PROFILE,
        adapters: Vec::new(),
        requests,
        duration_s: 60.0,
        calibration: CalibrationPlan::NONE,
    }
}

/// Routes the `i`-th request by the `i`-th choice.
struct Fixed(Vec<PdChoice>);

impl PdPolicy for Fixed {
    fn name(&self) -> String {
        "fixed".into()
    }
    fn route(&mut self, ctx: &PdContext<'_>) -> PdChoice {
        self.0.get(ctx.id).copied().unwrap_or(PdChoice::whole(0))
    }
}

fn run_fixed(scenario: &Scenario, layout: Layout, choices: Vec<PdChoice>) -> PdRun {
    let fleet = fleet_config(scenario.pods, layout, LINK, None);
    run(scenario, &fleet, &layout.roles(scenario.pods), LINK, &mut Fixed(choices))
}

fn run_kind(scenario: &Scenario, layout: Layout, kind: PolicyKind) -> PdRun {
    let fleet = kind.fleet(scenario.pods, layout, LINK);
    let mut policy = kind.build(&fleet, 7).unwrap();
    run(scenario, &fleet.config, &fleet.roles, LINK, policy.as_mut())
}

fn ttft(o: &PdOutcome) -> f64 {
    o.first_token.unwrap() - o.arrival
}

#[test]
fn a_split_requests_ttft_is_its_prefill_then_the_transfer_then_one_decode_step() {
    let s = scenario(2, vec![request(1, 4_000, 10, 0.0)]);
    let split = run_fixed(&s, Layout::Split { prefill: 1 }, vec![PdChoice { decode: 1, prefill: Some(0) }]);
    let o = &split.outcomes[0];
    let prefill = PROFILE.step_seconds(1, 4_000);
    let expected = prefill + LINK.seconds(4_000) + PROFILE.step_seconds(1, 1);
    assert!((ttft(o) - expected).abs() < 1e-9, "{} != {expected}", ttft(o));
    assert_eq!(o.prefill_done, Some(prefill));
    assert_eq!(o.transferred_tokens, 4_000);
    assert!(o.split() && o.finished.is_some());
    // Whole, it is its prefill step alone: the split costs the transfer and a step.
    let whole = run_fixed(&s, Layout::Aggregated, vec![PdChoice::whole(1)]);
    assert!((ttft(&whole.outcomes[0]) - prefill).abs() < 1e-9);
}

#[test]
fn each_request_has_a_gap_per_token_after_its_first() {
    let s = scenario(3, (0..6).map(|i| request(i, 1_000, 20 + i as u32, 0.05 * i as f64)).collect());
    let choices = (0..6).map(|i| PdChoice { decode: 1 + i % 2, prefill: (i % 3 != 0).then_some(0) }).collect();
    let run = run_fixed(&s, Layout::Split { prefill: 1 }, choices);
    for o in &run.outcomes {
        assert_eq!(o.gaps.len() as u32, o.output_tokens - 1);
        assert!(o.gaps.iter().all(|g| *g > 0.0));
    }
}

#[test]
fn transfers_to_one_decode_pod_take_its_link_in_turn() {
    // Two prefill pods finish the same prompt length at once; one decode pod pulls both.
    let s = scenario(3, vec![request(1, 4_000, 5, 0.0), request(2, 4_000, 5, 0.0)]);
    let choices = vec![PdChoice { decode: 2, prefill: Some(0) }, PdChoice { decode: 2, prefill: Some(1) }];
    let run = run_fixed(&s, Layout::Split { prefill: 2 }, choices);
    let (a, b) = (&run.outcomes[0], &run.outcomes[1]);
    assert_eq!(a.prefill_done, b.prefill_done);
    let done = a.prefill_done.unwrap();
    let x = LINK.seconds(4_000);
    assert!((a.transferred.unwrap() - (done + x)).abs() < 1e-9);
    assert!((b.transferred.unwrap() - (done + 2.0 * x)).abs() < 1e-9, "the second waits for the first");
}

#[test]
fn a_prefill_pod_never_decodes() {
    let s = scenario(3, (0..30).map(|i| request(i, 3_000, 50, 0.1 * i as f64)).collect());
    for kind in [
        PolicyKind::Infergate(SplitPolicy::Predicted),
        PolicyKind::Infergate(SplitPolicy::Never),
        PolicyKind::VllmProxy,
        PolicyKind::Llmd,
        PolicyKind::Dynamo,
        PolicyKind::Aibrix,
        PolicyKind::Sglang,
    ] {
        let run = run_kind(&s, Layout::Split { prefill: 1 }, kind);
        assert!(run.outcomes.iter().all(|o| o.finished.is_some()), "{kind:?}");
        assert!(run.outcomes.iter().all(|o| o.decode_pod != 0), "{kind:?} decoded on the prefill pod");
        // The prefill pod generated one token per prefill leg and nothing else.
        let legs = run.outcomes.iter().filter(|o| o.prefill_pod == Some(0)).count() as u64;
        assert_eq!(run.engines[0].stats(0.0).generation_tokens_total, legs, "{kind:?}");
    }
}

#[test]
fn always_split_with_one_prefill_pod_queues_on_it() {
    // Twelve 6,000-token prompts at once: one prefill pod computes them in turn.
    let requests: Vec<BenchRequest> = (0..12).map(|i| request(i, 6_000, 20, 0.0)).collect();
    let one = run_kind(&scenario(4, requests.clone()), Layout::Split { prefill: 1 }, PolicyKind::VllmProxy);
    let three = run_kind(&scenario(4, requests), Layout::Split { prefill: 3 }, PolicyKind::VllmProxy);
    let worst = |run: &PdRun| run.outcomes.iter().map(ttft).fold(0.0, f64::max);
    let compute = 12.0 * 6_000.0 / PROFILE.prefill_tokens_per_s;
    assert!(worst(&one) >= compute, "the last waits for every prefill: {} < {compute}", worst(&one));
    assert!(worst(&three) < worst(&one) / 2.0, "{} vs {}", worst(&three), worst(&one));
    let mut done: Vec<f64> = one.outcomes.iter().filter_map(|o| o.prefill_done).collect();
    done.dedup_by(|a, b| (*a - *b).abs() < 1e-12);
    assert!(done.len() >= 6, "prefills return over time, not together: {done:?}");
}

#[test]
fn infergate_always_splits_and_never_does_not() {
    let s = scenario(3, (0..20).map(|i| request(i, 3_000, 30, 0.1 * i as f64)).collect());
    let always = run_kind(&s, Layout::Split { prefill: 1 }, PolicyKind::Infergate(SplitPolicy::Always));
    assert!(always.outcomes.iter().all(|o| o.prefill_pod == Some(0)));
    let never = run_kind(&s, Layout::Split { prefill: 1 }, PolicyKind::Infergate(SplitPolicy::Never));
    assert!(never.outcomes.iter().all(|o| !o.split()));
    assert_eq!(never.engines[0].stats(0.0).prompt_tokens_total, 0, "the prefill pod stays idle");
}

#[test]
fn dynamo_prefills_on_the_decode_pod_a_prompt_it_holds() {
    // The same 4,000-token prompt twice, the second after the first finished: its decode
    // pod holds it all, so `eff_isl` is under 2,048 tokens and 0.7 of the prompt.
    let first = request(1, 4_000, 5, 0.0);
    let mut second = first.clone();
    second.arrival = Arrival::At(5.0);
    let run = run_kind(&scenario(2, vec![first, second]), Layout::Split { prefill: 1 }, PolicyKind::Dynamo);
    assert!(run.outcomes[0].split());
    assert!(!run.outcomes[1].split());
}

#[test]
fn the_llmd_decider_splits_what_the_decode_pod_was_not_sent() {
    let first = request(1, 4_000, 5, 0.0);
    let mut second = first.clone();
    second.arrival = Arrival::At(5.0);
    let run = run_kind(&scenario(2, vec![first, second]), Layout::Split { prefill: 1 }, PolicyKind::Llmd);
    assert!(run.outcomes[0].split());
    // The index holds the prompt's blocks for the decode pod: under 16 tokens uncached.
    assert!(!run.outcomes[1].split());
}

#[test]
fn goodput_counts_requests_within_both_objectives() {
    let ok = PdOutcome {
        arrival: 0.0,
        first_token: Some(1.0),
        finished: Some(2.0),
        output_tokens: 11,
        gaps: vec![0.01; 10],
        ..PdOutcome::default()
    };
    let slow_first = PdOutcome { first_token: Some(2.5), ..ok.clone() };
    // One gap in ten is a stall: the p90 is the ninth, still fine; two are not.
    let one_stall = PdOutcome { gaps: [vec![0.01; 9], vec![0.2]].concat(), ..ok.clone() };
    let two_stalls = PdOutcome { gaps: [vec![0.01; 8], vec![0.2; 2]].concat(), ..ok.clone() };
    let unfinished = PdOutcome { finished: None, ..ok.clone() };
    let not_sent = PdOutcome { not_sent: true, ..ok.clone() };
    let outcomes = [ok, slow_first, one_stall, two_stalls, unfinished, not_sent];
    let result = summarize("p", "agg", &outcomes, 2.0, Slo::TARGET);
    assert_eq!(result.requests, 5);
    assert_eq!(result.unfinished, 1);
    assert_eq!(result.goodput_per_s, 1.0, "two of five met it, over 2 s");
    assert_eq!(result.slo_attainment, 0.4);
}

#[test]
fn the_layouts_give_the_roles() {
    assert_eq!(Layout::Split { prefill: 3 }.roles(8).iter().filter(|r| **r == PodRole::Prefill).count(), 3);
    assert_eq!(Layout::Split { prefill: 3 }.short(8), "3P5D");
    assert!(Layout::Aggregated.roles(8).iter().all(|r| *r == PodRole::Both));
    let fleet = fleet_config(8, Layout::Split { prefill: 3 }, LINK, Some(SplitPolicy::Always));
    let pd = fleet.routing.pools[0].disaggregation.as_ref().unwrap();
    assert_eq!((pd.prefill_endpoints.len(), pd.decode_endpoints.len(), pd.split), (3, 5, SplitPolicy::Always));
}
