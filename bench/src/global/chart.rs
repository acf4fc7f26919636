//! The tier-2 chart: latency TTFT p90 and cost per 1M tokens, one bar per layer.

use std::path::Path;

use plotters::prelude::*;

use super::GlobalResult;

const COLORS: [RGBColor; 4] =
    [RGBColor(215, 40, 40), RGBColor(230, 140, 60), RGBColor(150, 150, 150), RGBColor(120, 170, 200)];

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    values: &[f64],
) -> Result<(), String> {
    let top = values.iter().copied().fold(1e-9, f64::max) * 1.2;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(20)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..values.len() as f64, 0.0..top)
        .map_err(|e| e.to_string())?;
    chart.configure_mesh().disable_x_mesh().x_labels(0).draw().map_err(|e| e.to_string())?;
    for (i, value) in values.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, *value)],
                color.filled(),
            )))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Writes an SVG with the two panels and a legend of the layers.
pub fn chart(path: &Path, results: &[GlobalResult]) -> Result<(), String> {
    crate::report::charts::register_font();
    let root = SVGBackend::new(path, (1000, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (body, legend) = root.split_vertically(370);
    let panels = body.split_evenly((1, 2));
    let ttft: Vec<f64> = results.iter().map(|r| r.latency_ttft_p90_ms).collect();
    let cost: Vec<f64> = results.iter().map(|r| r.cost_per_million_tokens).collect();
    panel(&panels[0], "latency-class TTFT p90 (ms)", &ttft)?;
    panel(&panels[1], "cost per 1M tokens", &cost)?;
    for (i, result) in results.iter().enumerate() {
        let x = 20 + 245 * i as i32;
        let color = COLORS[i % COLORS.len()];
        legend.draw(&Rectangle::new([(x, 20), (x + 16, 36)], color.filled())).map_err(|e| e.to_string())?;
        legend.draw(&Text::new(result.policy.clone(), (x + 22, 22), ("sans-serif", 15))).map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}
