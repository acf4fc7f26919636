//! Charts: TTFT p90 against offered load per workload (one line per policy), and a bar
//! chart of the headline comparison. Each as SVG and PNG.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::WorkloadReport;

const COLORS: [RGBColor; 9] = [
    RGBColor(150, 150, 150),
    RGBColor(190, 190, 120),
    RGBColor(120, 170, 200),
    RGBColor(230, 140, 60),
    RGBColor(200, 90, 160),
    RGBColor(110, 80, 190),
    RGBColor(60, 160, 110),
    RGBColor(215, 40, 40),
    RGBColor(30, 30, 30),
];

/// Registers DejaVu Sans, once: every backend measures its text with it.
pub fn register_font() -> bool {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *REGISTERED.get_or_init(|| {
        let candidates = ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/TTF/DejaVuSans.ttf"];
        candidates.iter().any(|path| {
            std::fs::read(path).is_ok_and(|bytes| {
                let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                plotters::style::register_font("sans-serif", FontStyle::Normal, leaked).is_ok()
            })
        })
    })
}

fn draw_lines<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, report: &WorkloadReport) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let x_max = report.qps.iter().copied().fold(1.0, f64::max) * 1.05;
    let values = report.policies.iter().flat_map(|p| p.runs.iter().map(|r| r.ttft_ms.p90.max(1.0)));
    let y_max = values.clone().fold(10.0, f64::max) * 2.0;
    let y_min = values.fold(f64::INFINITY, f64::min).max(1.0) / 2.0;
    let mut chart = ChartBuilder::on(root)
        .caption(format!("{}: TTFT p90 vs load", report.workload), ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, (y_min..y_max).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(format!("offered load ({})", report.load_unit()))
        .y_desc("TTFT p90 (ms, log)")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, policy) in report.policies.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let width = if policy.policy == "infergate" { 4 } else { 2 };
        let points: Vec<(f64, f64)> =
            report.qps.iter().zip(&policy.runs).map(|(q, r)| (*q, r.ttft_ms.p90.max(1.0))).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(width)))
            .map_err(|e| e.to_string())?
            .label(policy.policy.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(width)));
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, color.filled()))).map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

fn draw_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    bars: &[(String, f64)],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let y_max = bars.iter().map(|(_, v)| *v).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(70)
        .build_cartesian_2d(0..bars.len(), 0.0..y_max)
        .map_err(|e| e.to_string())?;
    let names: Vec<String> = bars.iter().map(|(n, _)| n.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len())
        .x_label_formatter(&|i| names.get(*i).cloned().unwrap_or_default())
        .y_desc("ms")
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (name, v))| {
            let color = if name.contains("infergate") { COLORS[7] } else { COLORS[2] };
            Rectangle::new([(i, 0.0), (i + 1, *v)], color.filled())
        }))
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// Writes one SVG and, when a font is available, one PNG per chart; returns the stems.
pub fn write_all(dir: &Path, reports: &[WorkloadReport]) -> Result<Vec<String>, String> {
    let png = register_font();
    let mut written = Vec::new();
    for report in reports {
        let stem = format!("ttft-p90-{}", report.workload);
        draw_lines(&SVGBackend::new(&dir.join(format!("{stem}.svg")), (960, 600)).into_drawing_area(), report)?;
        if png {
            draw_lines(&BitMapBackend::new(&dir.join(format!("{stem}.png")), (960, 600)).into_drawing_area(), report)?;
        }
        written.push(stem);
    }
    if let Some(headline) = reports.iter().find(|r| r.workload == "bursty-chat").or(reports.first()) {
        let top = headline.top_step();
        let bars: Vec<(String, f64)> = headline
            .policies
            .iter()
            .filter_map(|p| p.runs.get(top).map(|r| (p.policy.clone(), r.ttft_ms.p90)))
            .collect();
        let title =
            format!("{}: TTFT p90 at {} req/s", headline.workload, headline.qps.get(top).copied().unwrap_or_default());
        let stem = "headline";
        write_bars(dir, stem, &title, &bars)?;
        written.push(stem.to_string());
    }
    Ok(written)
}

/// One bar chart of TTFT p90 per named run (infergate's bars in red), as SVG and, when
/// a font is available, PNG.
pub fn write_bars(dir: &Path, stem: &str, title: &str, bars: &[(String, f64)]) -> Result<(), String> {
    // Text is measured with the registered font, in SVG too.
    let font = register_font();
    draw_bars(&SVGBackend::new(&dir.join(format!("{stem}.svg")), (960, 600)).into_drawing_area(), title, bars)?;
    if font {
        draw_bars(&BitMapBackend::new(&dir.join(format!("{stem}.png")), (960, 600)).into_drawing_area(), title, bars)?;
    }
    Ok(())
}
