//! Side-by-side bar panels, one bar per policy in each, and one legend of the
//! policies: for benchmarks that compare a few policies on a few figures.

use std::path::Path;

use plotters::prelude::*;

/// infergate's red, then orange, grey and blue for the others.
pub const INFERGATE_FIRST: [RGBColor; 4] =
    [RGBColor(215, 40, 40), RGBColor(230, 140, 60), RGBColor(150, 150, 150), RGBColor(120, 170, 200)];
/// Grey, blue and orange for the others, infergate's red last.
pub const INFERGATE_LAST: [RGBColor; 4] =
    [RGBColor(150, 150, 150), RGBColor(120, 170, 200), RGBColor(230, 140, 60), RGBColor(215, 40, 40)];

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    values: &[f64],
    colors: &[RGBColor],
) -> Result<(), String> {
    let top = values.iter().copied().fold(1e-9, f64::max) * 1.2;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(20)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..values.len() as f64, 0.0..top)
        .map_err(|e| e.to_string())?;
    chart.configure_mesh().disable_x_mesh().x_labels(0).draw().map_err(|e| e.to_string())?;
    for (i, value) in values.iter().enumerate() {
        let color = colors.get(i % colors.len().max(1)).copied().unwrap_or(BLACK);
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, *value)],
                color.filled(),
            )))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Writes an SVG (and, when a font is available, a PNG beside it) with one panel per
/// `(title, value per policy)`, side by side, and a legend of `policies`, the i-th
/// policy in `colors[i]`.
pub fn policy_panels(
    svg: &Path,
    panels: &[(&str, Vec<f64>)],
    policies: &[&str],
    colors: &[RGBColor],
) -> Result<(), String> {
    let font = super::charts::register_font();
    let size = (500 * panels.len().max(1) as u32, 440);
    draw(&SVGBackend::new(svg, size).into_drawing_area(), panels, policies, colors)?;
    if font {
        let png = svg.with_extension("png");
        draw(&BitMapBackend::new(&png, size).into_drawing_area(), panels, policies, colors)?;
    }
    Ok(())
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    panels: &[(&str, Vec<f64>)],
    policies: &[&str],
    colors: &[RGBColor],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (body, legend) = root.split_vertically(370);
    let areas = body.split_evenly((1, panels.len().max(1)));
    for (area, (title, values)) in areas.iter().zip(panels) {
        panel(area, title, values, colors)?;
    }
    for (i, policy) in policies.iter().enumerate() {
        let x = 20 + 245 * i as i32;
        let color = colors.get(i % colors.len().max(1)).copied().unwrap_or(BLACK);
        legend.draw(&Rectangle::new([(x, 20), (x + 16, 36)], color.filled())).map_err(|e| e.to_string())?;
        legend.draw(&Text::new(policy.to_string(), (x + 22, 22), ("sans-serif", 15))).map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}
