//! The P/D benchmark's chart: goodput against offered load, one panel per workload,
//! one line per policy, in the look of `report::style`. P/D policies are solid lines,
//! aggregated ones dashed, each peer's two in the same colour; infergate's P/D router
//! is the thick red line, its aggregated router red and dashed, its `always` and
//! `never` splits lighter and darker reds. The value at the heaviest load of each line
//! is down the right, which is also the legend.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::summary::WorkloadRuns;
use crate::report::bars::{self, err};
use crate::report::style::{self, HPos, Ticked, Unit, VPos, ValueAxis};

const PANEL: u32 = 470;
const PANEL_TITLE: u32 = 40;

/// How a policy's line is drawn.
struct Look {
    color: RGBColor,
    width: u32,
    dashed: bool,
}

fn look(name: &str, index: usize) -> Look {
    let dashed = name.starts_with("agg/");
    let peer = |aggregated: &str| style::color_of(aggregated, index);
    let color = match name {
        "pd/infergate" | "agg/infergate" => style::INFERGATE,
        "pd/infergate-always" => RGBColor(240, 150, 150),
        "pd/infergate-never" => RGBColor(140, 25, 25),
        "pd/llmd" => peer("llmd_precise"),
        "pd/dynamo" => peer("dynamo_kv"),
        "pd/sglang" => peer("sglang_cache_aware"),
        "pd/vllm_proxy" => peer("round_robin"),
        "pd/aibrix" => peer("random"),
        other => peer(other),
    };
    let width = match name {
        "pd/infergate" => 4,
        "agg/infergate" => 3,
        _ => 2,
    };
    Look { color, width, dashed }
}

/// Writes `<stem>.svg` and, when the font is there, `<stem>.png` in `dir`.
pub fn goodput_chart(dir: &Path, stem: &str, title: &str, runs: &[WorkloadRuns]) -> Result<(), String> {
    let png = style::register_fonts();
    let size = (style::WIDTH, bars::TITLE + PANEL * runs.len().max(1) as u32);
    draw(&SVGBackend::new(&dir.join(format!("{stem}.svg")), size).into_drawing_area(), title, runs)?;
    if png {
        draw(&BitMapBackend::new(&dir.join(format!("{stem}.png")), size).into_drawing_area(), title, runs)?;
    }
    Ok(())
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, title: &str, runs: &[WorkloadRuns]) -> Result<(), String> {
    root.fill(&WHITE).map_err(err)?;
    let (top, mut rest) = root.split_vertically(bars::TITLE);
    bars::title(&top, title)?;
    for workload in runs {
        let (area, below) = rest.split_vertically(PANEL);
        panel(&area, workload)?;
        rest = below;
    }
    root.present().map_err(err)
}

/// One series' last point, placed in the column on the right.
struct Entry {
    name: String,
    value: f64,
    look: Look,
    point: (i32, i32),
}

fn panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, workload: &WorkloadRuns) -> Result<(), String> {
    let (head, body) = area.split_vertically(PANEL_TITLE);
    let heading = format!(
        "{}: goodput at {} to {} {}",
        workload.workload,
        workload.loads.first().copied().unwrap_or(0.0),
        workload.loads.last().copied().unwrap_or(0.0),
        workload.load_unit
    );
    let style = style::anchored(style::text(style::AXIS_TITLE_PX + 2.0, style::INK, true), HPos::Left, VPos::Center);
    head.draw_text(&heading, &style, (16, PANEL_TITLE as i32 / 2 + 4)).map_err(err)?;

    let last = workload.loads.len().saturating_sub(1);
    let label = per_second;
    let mut column = 0;
    for (name, results) in &workload.policies {
        let text = style::text(style::LABEL_PX - 1.0, style::INK, style::is_ours(name));
        let value = results.get(last).map_or(String::new(), |r| label(r.goodput_per_s));
        let w = area.estimate_text_size(name, &text).map_err(err)?.0
            + area.estimate_text_size(&value, &text).map_err(err)?.0;
        column = column.max(w);
    }
    let column = column + 28 + 16 + 12;
    let (left, _) = body.split_horizontally(style::WIDTH - column - 24);

    let (first, final_load) =
        (workload.loads.first().copied().unwrap_or(0.0), workload.loads.last().copied().unwrap_or(1.0));
    let values: Vec<f64> =
        workload.policies.iter().flat_map(|(_, r)| r.iter().map(|r| r.goodput_per_s)).chain([0.0]).collect();
    let height = f64::from(PANEL - PANEL_TITLE - bars::X_AXIS - 10);
    let axis = ValueAxis::fit(&values, Unit::PerSecond, height, 20.0, 40.0);
    let pad = ((final_load - first) * 0.06).max(0.1);
    let mut chart = ChartBuilder::on(&left)
        .margin_left(14)
        .margin_top(6)
        .margin_right(8)
        .x_label_area_size(bars::X_AXIS)
        .y_label_area_size(80)
        .build_cartesian_2d(
            Ticked { low: first - pad, high: final_load + pad, ticks: workload.loads.clone(), minor: Vec::new() },
            axis.coord(),
        )
        .map_err(err)?;
    let y_label = |at: &f64| axis.tick_label(*at);
    let x_label = |q: &f64| format!("{q}");
    chart
        .configure_mesh()
        .bold_line_style(style::GRID)
        .light_line_style(style::GRID_LIGHT)
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .label_style(("sans-serif", style::TICK_PX).into_font().color(&style::INK))
        .x_desc(format!("offered load ({})", workload.load_unit))
        .y_desc(axis.title("goodput"))
        .axis_desc_style(("sans-serif", style::AXIS_TITLE_PX).into_font().color(&style::INK))
        .draw()
        .map_err(err)?;

    // infergate's P/D router last, on top.
    let mut order: Vec<usize> = (0..workload.policies.len()).collect();
    order.sort_by_key(|&i| workload.policies.get(i).map(|(n, _)| (n == "pd/infergate", n == "agg/infergate")));
    let mut entries = Vec::new();
    for i in order {
        let Some((name, results)) = workload.policies.get(i) else { continue };
        let look = look(name, i);
        let points: Vec<(f64, f64)> =
            workload.loads.iter().zip(results).map(|(q, r)| (*q, axis.plot(r.goodput_per_s))).collect();
        let line = look.color.stroke_width(look.width);
        if look.dashed {
            chart.draw_series(DashedLineSeries::new(points.clone(), 9, 6, line)).map_err(err)?;
        } else {
            chart.draw_series(LineSeries::new(points.clone(), line)).map_err(err)?;
        }
        let radius = if look.width >= 4 { 5 } else { 3 };
        chart.draw_series(points.iter().map(|p| Circle::new(*p, radius, look.color.filled()))).map_err(err)?;
        if let (Some(point), Some(result)) = (points.last(), results.last()) {
            let point = chart.backend_coord(point);
            entries.push(Entry { name: name.clone(), value: result.goodput_per_s, look, point });
        }
    }
    let x = style::WIDTH - column - 12;
    legend(area, &entries, x, column, &format!("at {final_load} {}", workload.load_unit))
}

/// A goodput as the legend writes it: two decimals under 10 req/s.
fn per_second(value: f64) -> String {
    if value < 10.0 { format!("{value:.2} req/s") } else { Unit::PerSecond.label(value) }
}

/// Spreads labels wanted at `ys` (sorted) at least `gap` apart within `top..bottom`:
/// pushed down from the top, then up from the bottom, then down again where the
/// column is too short for them all.
fn spread(ys: &mut [i32], gap: i32, top: i32, bottom: i32) {
    let down = |ys: &mut [i32]| {
        let mut floor = top;
        for y in ys.iter_mut() {
            *y = (*y).max(floor);
            floor = y.saturating_add(gap);
        }
    };
    down(ys);
    let mut ceiling = bottom;
    for y in ys.iter_mut().rev() {
        *y = (*y).min(ceiling);
        ceiling = y.saturating_sub(gap);
    }
    down(ys);
}

/// Each line's swatch, name and last value, at the height of its last point, spread so
/// that none overlap, a thin line back to the point.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[Entry],
    x: u32,
    width: u32,
    header: &str,
) -> Result<(), String> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| b.value.total_cmp(&a.value));
    let base = area.get_base_pixel();
    let mut ys: Vec<i32> = sorted.iter().map(|e| e.point.1 - base.1).collect();
    let (top, bottom) = (PANEL_TITLE as i32 + 26, (PANEL - bars::X_AXIS) as i32);
    spread(&mut ys, 20, top, bottom);
    let x = x as i32;
    let header_style = style::text(style::LABEL_PX - 1.0, style::INK, false);
    area.draw_text(header, &header_style, (x + 28, PANEL_TITLE as i32 + 6)).map_err(err)?;
    for (entry, y) in sorted.iter().zip(ys) {
        let ours = style::is_ours(&entry.name);
        let ink = if ours { style::INFERGATE } else { style::INK };
        let text = style::text(style::LABEL_PX - 1.0, ink, ours);
        let leader = entry.look.color.mix(0.5).stroke_width(1);
        let point = (entry.point.0 - base.0 + 6, entry.point.1 - base.1);
        area.draw(&PathElement::new(vec![point, (x - 2, y)], leader)).map_err(err)?;
        let swatch = entry.look.color.stroke_width(entry.look.width + 1);
        if entry.look.dashed {
            area.draw(&PathElement::new(vec![(x + 2, y), (x + 9, y)], swatch)).map_err(err)?;
            area.draw(&PathElement::new(vec![(x + 15, y), (x + 22, y)], swatch)).map_err(err)?;
        } else {
            area.draw(&PathElement::new(vec![(x + 2, y), (x + 22, y)], swatch)).map_err(err)?;
        }
        area.draw_text(&entry.name, &text, (x + 28, y)).map_err(err)?;
        let value = style::anchored(text, HPos::Right, VPos::Center);
        area.draw_text(&per_second(entry.value), &value, (x + width as i32 - 6, y)).map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::spread;

    #[test]
    fn labels_keep_apart_when_some_crowd_the_bottom() {
        // Three at the top, six at the bottom: the bottom ones move up, not the top ones
        // onto each other.
        let mut ys = vec![50, 51, 52, 395, 396, 397, 398, 399, 400];
        spread(&mut ys, 20, 66, 408);
        assert!(ys.windows(2).all(|w| w[1] - w[0] >= 20), "{ys:?}");
        assert_eq!((ys[0], ys[8]), (66, 408));
    }
}
