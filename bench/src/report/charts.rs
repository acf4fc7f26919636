//! Part 1's charts: TTFT p90 against offered load per workload, one line per policy
//! with its value at the heaviest load down the right (which is also the legend) and
//! infergate's at every load; a bar chart where a workload has one load step, and the
//! headline's bars. Each as SVG and PNG, in the look of `style`.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::WorkloadReport;
use super::bars::{self, Bars, err};
use super::style::{self, HPos, Ticked, Unit, VPos, ValueAxis};

pub use super::bars::write_bars;

const HEIGHT: u32 = 600;

/// How a workload's load steps read: a tick ("5", "1.5×"), a short phrase for "at …"
/// ("60 req/s"), the unit after a range, and the x axis' title.
struct Load {
    workload: String,
}

impl Load {
    fn tick(&self, q: f64) -> String {
        match self.workload.as_str() {
            "trace-replay" => format!("{q}×"),
            _ => format!("{q}"),
        }
    }

    fn short(&self, q: f64) -> String {
        match self.workload.as_str() {
            "trace-replay" => format!("{q}×"),
            "agentic" => format!("{q} sessions"),
            _ => format!("{q} req/s"),
        }
    }

    fn unit(&self) -> &'static str {
        match self.workload.as_str() {
            "trace-replay" => "the trace's recorded rate",
            "agentic" => "sessions at once",
            _ => "req/s",
        }
    }

    fn axis(&self) -> &'static str {
        match self.workload.as_str() {
            "trace-replay" => "replay speed (× the trace's recorded rate)",
            "agentic" => "sessions at once",
            _ => "offered load (req/s)",
        }
    }
}

/// `q` of `workload`'s load, for "at …": "9.6 req/s", "2.5×", "64 sessions".
pub fn load_short(workload: &str, q: f64) -> String {
    Load { workload: workload.to_string() }.short(q)
}

/// One series' last point, placed in the column on the right.
struct Entry {
    name: String,
    value: f64,
    color: RGBColor,
    /// The last point, in backend pixels.
    point: (i32, i32),
}

/// Spreads labels wanted at `ys` (sorted) at least `gap` apart within `top..bottom`.
fn spread(ys: &mut [i32], gap: i32, top: i32, bottom: i32) {
    let mut floor = i32::MIN;
    for y in ys.iter_mut() {
        *y = (*y).max(floor);
        floor = y.saturating_add(gap);
    }
    let overflow = ys.last().map_or(0, |last| (last - bottom).max(0));
    for y in ys.iter_mut() {
        *y = (*y - overflow).max(top);
    }
}

fn draw_lines<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, report: &WorkloadReport) -> Result<(), String> {
    root.fill(&WHITE).map_err(err)?;
    let load = Load { workload: report.workload.clone() };
    let (first, last) = (report.qps.first().copied().unwrap_or(0.0), report.qps.last().copied().unwrap_or(1.0));
    let title = format!("{}: TTFT p90 at {} to {} {}", report.workload, load.tick(first), load.tick(last), load.unit());
    let (top, body) = root.split_vertically(bars::TITLE);
    bars::title(&top, &title)?;

    // The column on the right: a swatch, the name, the value at the heaviest load.
    let top_step = report.top_step();
    let label_of = |p: &super::PolicyRuns| p.runs.get(top_step).map(|r| Unit::Millis.label(r.ttft_ms.p90));
    let mut column = 0;
    for policy in &report.policies {
        let style = style::text(style::LABEL_PX, style::INK, style::is_ours(&policy.policy));
        let name = root.estimate_text_size(&policy.policy, &style).map_err(err)?.0;
        let value = root.estimate_text_size(&label_of(policy).unwrap_or_default(), &style).map_err(err)?.0;
        column = column.max(name + value);
    }
    let column = column + 28 + 16 + 12;
    let (left, _) = body.split_horizontally(style::WIDTH - column - 24);

    let values: Vec<f64> = report.policies.iter().flat_map(|p| p.runs.iter().map(|r| r.ttft_ms.p90)).collect();
    let height = f64::from(HEIGHT - bars::TITLE - bars::X_AXIS - 10);
    let axis = ValueAxis::fit(&values, Unit::Millis, height, 26.0, 34.0);
    let pad = ((last - first) * 0.06).max(0.1);
    let mut chart = ChartBuilder::on(&left)
        .margin_left(14)
        .margin_top(10)
        .margin_right(8)
        .x_label_area_size(bars::X_AXIS)
        .y_label_area_size(100)
        .build_cartesian_2d(
            Ticked { low: first - pad, high: last + pad, ticks: report.qps.clone(), minor: Vec::new() },
            axis.coord(),
        )
        .map_err(err)?;
    let y_label = |at: &f64| axis.tick_label(*at);
    let x_label = |q: &f64| load.tick(*q);
    let tick_style = ("sans-serif", style::TICK_PX).into_font().color(&style::INK);
    chart
        .configure_mesh()
        .bold_line_style(style::GRID)
        .light_line_style(style::GRID_LIGHT)
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .label_style(tick_style)
        .x_desc(load.axis())
        .y_desc(axis.title("TTFT p90"))
        .axis_desc_style(("sans-serif", style::AXIS_TITLE_PX).into_font().color(&style::INK))
        .draw()
        .map_err(err)?;

    // infergate last, on top; the oracle dashed.
    let mut order: Vec<usize> = (0..report.policies.len()).collect();
    order.sort_by_key(|i| report.policies.get(*i).is_some_and(|p| style::is_ours(&p.policy)));
    let mut entries = Vec::new();
    for i in order {
        let Some(policy) = report.policies.get(i) else { continue };
        let ours = style::is_ours(&policy.policy);
        let color = style::color_of(&policy.policy, i);
        let points: Vec<(f64, f64)> =
            report.qps.iter().zip(&policy.runs).map(|(q, r)| (*q, axis.plot(r.ttft_ms.p90))).collect();
        let line = color.stroke_width(if ours { 4 } else { 2 });
        if policy.policy == "oracle" {
            chart.draw_series(DashedLineSeries::new(points.clone(), 8, 5, line)).map_err(err)?;
        } else {
            chart.draw_series(LineSeries::new(points.clone(), line)).map_err(err)?;
        }
        let radius = if ours { 5 } else { 3 };
        chart.draw_series(points.iter().map(|p| Circle::new(*p, radius, color.filled()))).map_err(err)?;
        if ours {
            // infergate's value at every load but the last, which the column shows:
            // below its point where it is the lowest there, above it otherwise.
            for (step, (run, point)) in policy.runs.iter().zip(&points).enumerate().take(points.len().saturating_sub(1))
            {
                let lowest =
                    report.policies.iter().filter_map(|p| p.runs.get(step)).all(|r| r.ttft_ms.p90 >= run.ttft_ms.p90);
                let (x, y) = chart.backend_coord(point);
                let (v, y) = if lowest { (VPos::Top, y + 9) } else { (VPos::Bottom, y - 9) };
                let style =
                    style::anchored(style::text(style::LABEL_PX - 1.0, style::INFERGATE, true), HPos::Center, v);
                boxed_text(root, &Unit::Millis.label(run.ttft_ms.p90), &style, (x, y))?;
            }
        }
        if let (Some(point), Some(run)) = (points.last(), policy.runs.last()) {
            let point = chart.backend_coord(point);
            entries.push(Entry { name: policy.policy.clone(), value: run.ttft_ms.p90, color, point });
        }
    }
    draw_column(root, &entries, style::WIDTH - column - 12, column, &format!("at {}", load.short(last)))?;
    root.present().map_err(err)
}

/// `text` on a white box, so that it reads over the lines it crosses.
fn boxed_text<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    text: &str,
    style: &TextStyle,
    at: (i32, i32),
) -> Result<(), String> {
    let (w, h) = root.estimate_text_size(text, style).map_err(err)?;
    let (w, h) = (w as i32, h as i32);
    let left = match style.pos.h_pos {
        HPos::Left => at.0,
        HPos::Center => at.0 - w / 2,
        HPos::Right => at.0 - w,
    };
    let top = match style.pos.v_pos {
        VPos::Top => at.1,
        VPos::Center => at.1 - h / 2,
        VPos::Bottom => at.1 - h,
    };
    let backing = Rectangle::new([(left - 3, top - 2), (left + w + 3, top + h + 2)], WHITE.mix(0.85).filled());
    root.draw(&backing).map_err(err)?;
    root.draw_text(text, style, at).map_err(err)
}

/// The legend on the right: each series' swatch, name and last value, at the height of
/// its last point (spread so that none overlap), a thin line back to the point.
fn draw_column<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    entries: &[Entry],
    x: u32,
    width: u32,
    header: &str,
) -> Result<(), String> {
    // Highest value first: top to bottom as the lines end.
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| b.value.total_cmp(&a.value));
    let mut ys: Vec<i32> = sorted.iter().map(|e| e.point.1).collect();
    let (top, bottom) = (bars::TITLE as i32 + 30, (HEIGHT - bars::X_AXIS) as i32);
    spread(&mut ys, 21, top, bottom);
    let x = x as i32;
    let header_style = style::text(style::LABEL_PX, style::INK, false);
    root.draw_text(header, &header_style, (x + 28, bars::TITLE as i32 + 8)).map_err(err)?;
    for (entry, y) in sorted.iter().zip(ys) {
        let ours = style::is_ours(&entry.name);
        let ink = if ours { style::INFERGATE } else { style::INK };
        let text = style::text(style::LABEL_PX, ink, ours);
        let leader = entry.color.mix(0.6).stroke_width(1);
        root.draw(&PathElement::new(vec![(entry.point.0 + 6, entry.point.1), (x - 2, y)], leader)).map_err(err)?;
        let swatch = entry.color.stroke_width(if ours { 5 } else { 3 });
        root.draw(&PathElement::new(vec![(x + 2, y), (x + 22, y)], swatch)).map_err(err)?;
        root.draw_text(&entry.name, &text, (x + 28, y)).map_err(err)?;
        let value = style::anchored(text, HPos::Right, VPos::Center);
        root.draw_text(&Unit::Millis.label(entry.value), &value, (x + width as i32 - 6, y)).map_err(err)?;
    }
    Ok(())
}

/// The bars of one load step: TTFT p90 per policy.
fn step_bars(report: &WorkloadReport, step: usize) -> Vec<(String, f64)> {
    report.policies.iter().filter_map(|p| p.runs.get(step).map(|r| (p.policy.clone(), r.ttft_ms.p90))).collect()
}

/// The title of a bar chart of one load step.
fn step_title(report: &WorkloadReport, step: usize) -> String {
    let load = Load { workload: report.workload.clone() };
    let q = report.qps.get(step).copied().unwrap_or_default();
    format!("{} at {}: TTFT p90 per policy", report.workload, load.short(q))
}

/// Writes one SVG and, when the font is there, one PNG per workload and the headline
/// (bursty-chat's heaviest step); returns the stems.
pub fn write_all(dir: &Path, reports: &[WorkloadReport]) -> Result<Vec<String>, String> {
    let png = style::register_fonts();
    let mut written = Vec::new();
    for report in reports {
        let stem = format!("ttft-p90-{}", report.workload);
        if report.qps.len() < 2 {
            // One load step: a line would be a dot.
            let (title, values) = (step_title(report, 0), step_bars(report, 0));
            write_bars(dir, &stem, &Bars { title: &title, metric: "TTFT p90", unit: Unit::Millis, bars: &values })?;
        } else {
            let size = (style::WIDTH, HEIGHT);
            draw_lines(&SVGBackend::new(&dir.join(format!("{stem}.svg")), size).into_drawing_area(), report)?;
            if png {
                draw_lines(&BitMapBackend::new(&dir.join(format!("{stem}.png")), size).into_drawing_area(), report)?;
            }
        }
        written.push(stem);
    }
    if let Some(headline) = reports.iter().find(|r| r.workload == "bursty-chat").or(reports.first()) {
        let top = headline.top_step();
        let (title, values) = (step_title(headline, top), step_bars(headline, top));
        write_bars(dir, "headline", &Bars { title: &title, metric: "TTFT p90", unit: Unit::Millis, bars: &values })?;
        written.push("headline".to_string());
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::PolicyRuns;
    use crate::results::{Percentiles, RunResult};

    fn run(p90: f64) -> RunResult {
        RunResult {
            requests: 100,
            failed: 0,
            ttft_ms: Percentiles { mean: p90, p50: p90, p90, p99: p90 },
            tpot_p90_ms: 0.0,
            e2e_p90_ms: 0.0,
            output_tokens_per_s: 0.0,
            prefix_hit_rate: 0.0,
            lora_loads: 0,
            load_imbalance_cv: 0.0,
            calibration: None,
            prefix_belief: None,
        }
    }

    #[test]
    fn the_charts_label_every_value_on_a_log_axis_when_the_policies_are_far_apart() {
        let dir = std::env::temp_dir().join(format!("infergate-charts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let policies = vec![
            PolicyRuns { policy: "round_robin".into(), runs: vec![run(5_960.0), run(20_000.0)], by_seed: Vec::new() },
            PolicyRuns { policy: "infergate".into(), runs: vec![run(44.3), run(45.0)], by_seed: Vec::new() },
        ];
        let report = WorkloadReport {
            workload: "bursty-chat".into(),
            seed: 42,
            seeds: Vec::new(),
            qps: vec![4.8, 9.6],
            policies,
        };
        let written = write_all(&dir, &[report]).unwrap_or_default();
        let read = |stem: &str| std::fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap_or_default();
        let (lines, headline) = (read("ttft-p90-bursty-chat"), read("headline"));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(written, ["ttft-p90-bursty-chat", "headline"]);
        let has = |svg: &str, text: &str| svg.contains(&format!("\n{text}\n"));
        assert!(has(&lines, "bursty-chat: TTFT p90 at 4.8 to 9.6 req/s"), "{lines}");
        assert!(has(&lines, "TTFT p90 (ms, s, log scale)") && has(&lines, "offered load (req/s)"), "{lines}");
        // infergate's first point in the plot; every last value in the legend column.
        assert!(has(&lines, "44.3 ms") && has(&lines, "45.0 ms") && has(&lines, "20.0 s"), "{lines}");
        assert!(has(&lines, "at 9.6 req/s") && has(&lines, "round_robin"), "{lines}");
        // The headline: the heaviest step's bars, each with its value.
        assert!(has(&headline, "bursty-chat at 9.6 req/s: TTFT p90 per policy"), "{headline}");
        assert!(has(&headline, "45.0 ms") && has(&headline, "20.0 s") && !has(&headline, "44.3 ms"), "{headline}");
    }

    #[test]
    fn labels_spread_apart_and_stay_in_their_column() {
        let mut ys = vec![100, 101, 102, 300];
        spread(&mut ys, 20, 50, 500);
        assert_eq!(ys, vec![100, 120, 140, 300]);
        let mut crowded = vec![490, 495, 500];
        spread(&mut crowded, 20, 50, 500);
        assert_eq!(crowded, vec![460, 480, 500]);
    }
}
