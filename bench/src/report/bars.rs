//! Horizontal bar charts: one bar per named run, its value written at its end, the
//! names down the left where they have room; infergate's bar red, its name and value
//! bold. One chart, or one panel of several (`panels`).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::style::{self, HPos, Unit, VPos, ValueAxis};

/// One bar chart, or one panel.
pub struct Bars<'a> {
    /// A chart's title says the workload, the metric and the load; a panel's, its metric.
    pub title: &'a str,
    /// The value axis' title, without its unit: "TTFT p90".
    pub metric: &'a str,
    pub unit: Unit,
    /// (name, value), drawn top to bottom.
    pub bars: &'a [(String, f64)],
}

/// Pixels per bar, a panel's title, and the tick labels and axis title under it.
pub const ROW: u32 = 46;
pub const PANEL_TITLE: u32 = 46;
pub const X_AXIS: u32 = 62;
/// The chart's title above everything.
pub const TITLE: u32 = 52;

pub fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The height of a panel of `n` bars.
pub fn panel_height(n: usize, titled: bool) -> u32 {
    let title = if titled { PANEL_TITLE } else { 8 };
    title + ROW * n.max(1) as u32 + X_AXIS + 12
}

/// Writes `<stem>.svg` and, when the font is there, `<stem>.png` in `dir`.
pub fn write_bars(dir: &Path, stem: &str, chart: &Bars) -> Result<(), String> {
    let font = style::register_fonts();
    let size = (style::WIDTH, TITLE + panel_height(chart.bars.len(), false));
    draw(&SVGBackend::new(&dir.join(format!("{stem}.svg")), size).into_drawing_area(), chart)?;
    if font {
        draw(&BitMapBackend::new(&dir.join(format!("{stem}.png")), size).into_drawing_area(), chart)?;
    }
    Ok(())
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Bars) -> Result<(), String> {
    root.fill(&WHITE).map_err(err)?;
    let (top, body) = root.split_vertically(TITLE);
    title(&top, chart.title)?;
    let names = label_width(root, &[chart])?;
    panel(&body, chart, names, false)?;
    root.present().map_err(err)
}

/// The chart's title, centred in `area`.
pub fn title<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, text: &str) -> Result<(), String> {
    let style = style::anchored(style::text(style::TITLE_PX, style::INK, true), HPos::Center, VPos::Center);
    let (width, height) = area.dim_in_pixel();
    area.draw_text(text, &style, (width as i32 / 2, height as i32 / 2)).map_err(err)
}

/// Pixels the widest bar name of `charts` takes, plus a gap.
pub fn label_width<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, charts: &[&Bars]) -> Result<u32, String> {
    let mut widest = 0;
    for (name, _) in charts.iter().flat_map(|c| c.bars.iter()) {
        let style = style::text(style::LABEL_PX, style::INK, style::is_ours(name));
        widest = widest.max(root.estimate_text_size(name, &style).map_err(err)?.0);
    }
    Ok(widest + 18)
}

/// Draws `chart` in `area` with `names` pixels for the bar names on the left.
pub fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &Bars,
    names: u32,
    titled: bool,
) -> Result<(), String> {
    let area = if titled {
        let (head, rest) = area.split_vertically(PANEL_TITLE);
        let style = style::text(style::AXIS_TITLE_PX + 1.0, style::INK, true);
        head.draw_text(chart.title, &style, (names as i32 - 8, PANEL_TITLE as i32 - 16)).map_err(err)?;
        rest
    } else {
        area.clone()
    };
    let values: Vec<f64> = chart.bars.iter().map(|(_, v)| *v).collect();
    let mut room = 0;
    for (name, value) in chart.bars {
        let style = style::text(style::LABEL_PX, style::INK, style::is_ours(name));
        room = room.max(area.estimate_text_size(&chart.unit.label(*value), &style).map_err(err)?.0);
    }
    let margin_right = 44;
    let length = f64::from(area.dim_in_pixel().0.saturating_sub(names + margin_right).max(100));
    let axis = ValueAxis::fit(&values, chart.unit, length, f64::from(room + 14), 90.0);
    let n = chart.bars.len().max(1) as f64;
    let mut plot = ChartBuilder::on(&area)
        .margin_top(4)
        .margin_right(margin_right)
        .x_label_area_size(X_AXIS)
        .y_label_area_size(names)
        .build_cartesian_2d(axis.coord(), 0.0..n)
        .map_err(err)?;
    let tick_label = |at: &f64| axis.tick_label(*at);
    plot.configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .bold_line_style(style::GRID)
        .light_line_style(style::GRID_LIGHT)
        .x_label_formatter(&tick_label)
        .x_label_style(("sans-serif", style::TICK_PX).into_font().color(&style::INK))
        .x_desc(axis.title(chart.metric))
        .axis_desc_style(("sans-serif", style::AXIS_TITLE_PX).into_font().color(&style::INK))
        .draw()
        .map_err(err)?;
    let base = area.get_base_pixel();
    for (i, (name, value)) in chart.bars.iter().enumerate() {
        let ours = style::is_ours(name);
        let color = style::color_of(name, i);
        let row = n - 1.0 - i as f64;
        let end = axis.plot(*value);
        plot.draw_series(std::iter::once(Rectangle::new([(axis.low, row + 0.2), (end, row + 0.8)], color.filled())))
            .map_err(err)?;
        let ink = if ours { style::INFERGATE } else { style::INK };
        let label = style::text(style::LABEL_PX, ink, ours);
        let (x, y) = plot.backend_coord(&(end, row + 0.5));
        area.draw_text(&chart.unit.label(*value), &label, (x - base.0 + 7, y - base.1)).map_err(err)?;
        let (left, _) = plot.backend_coord(&(axis.low, row + 0.5));
        let name_style = style::anchored(label, HPos::Right, VPos::Center);
        area.draw_text(name, &name_style, (left - base.0 - 8, y - base.1)).map_err(err)?;
    }
    Ok(())
}
