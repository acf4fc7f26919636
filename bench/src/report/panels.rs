//! Bar panels stacked one above the other, one bar per policy in each, the names
//! aligned down the left: for benchmarks that compare a few policies on a few figures.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::bars::{self, Bars, err};
use super::style;

/// Writes an SVG (and, when the font is there, a PNG beside it) titled `title`, with
/// one panel per chart of `panels`, top to bottom.
pub fn policy_panels(svg: &Path, title: &str, panels: &[Bars]) -> Result<(), String> {
    let font = style::register_fonts();
    let height = bars::TITLE + panels.iter().map(|p| bars::panel_height(p.bars.len(), true)).sum::<u32>();
    let size = (style::WIDTH, height);
    draw(&SVGBackend::new(svg, size).into_drawing_area(), title, panels)?;
    if font {
        let png = svg.with_extension("png");
        draw(&BitMapBackend::new(&png, size).into_drawing_area(), title, panels)?;
    }
    Ok(())
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, title: &str, panels: &[Bars]) -> Result<(), String> {
    root.fill(&WHITE).map_err(err)?;
    let (top, mut rest) = root.split_vertically(bars::TITLE);
    bars::title(&top, title)?;
    let all: Vec<&Bars> = panels.iter().collect();
    let names = bars::label_width(root, &all)?;
    for panel in panels {
        let (area, below) = rest.split_vertically(bars::panel_height(panel.bars.len(), true));
        bars::panel(&area, panel, names, true)?;
        rest = below;
    }
    root.present().map_err(err)
}
