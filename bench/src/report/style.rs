//! The one look of every chart the bench draws: the value axis (log scale when the
//! values span more than an order of magnitude, linear otherwise), how values and ticks
//! are written (ms under 10 s, s above), infergate in red and bold beside the peers in
//! muted colours, and the fonts and sizes that stay readable in a 960-pixel PNG.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
pub use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{Color, FontDesc, FontFamily, FontStyle, RGBColor, TextStyle};

/// A chart's width in pixels: what a Markdown page shows without scaling it down much.
pub const WIDTH: u32 = 960;
/// Font sizes, in pixels of the PNG.
pub const TITLE_PX: f64 = 23.0;
pub const AXIS_TITLE_PX: f64 = 17.0;
pub const TICK_PX: f64 = 16.0;
pub const LABEL_PX: f64 = 17.0;

/// infergate's colour; the peers' are muted beside it.
pub const INFERGATE: RGBColor = RGBColor(214, 39, 40);
/// Text that is not infergate's.
pub const INK: RGBColor = RGBColor(40, 40, 40);
/// The oracle: a reference, not a peer, drawn dark and dashed.
pub const REFERENCE: RGBColor = RGBColor(70, 70, 70);
/// Grid lines.
pub const GRID: RGBColor = RGBColor(215, 215, 215);
pub const GRID_LIGHT: RGBColor = RGBColor(238, 238, 238);

/// Muted colours for the peers, by name where a name recurs across charts, else in turn.
const MUTED: [RGBColor; 8] = [
    RGBColor(150, 150, 150),
    RGBColor(120, 160, 200),
    RGBColor(215, 165, 105),
    RGBColor(125, 175, 135),
    RGBColor(180, 140, 190),
    RGBColor(190, 180, 120),
    RGBColor(140, 125, 195),
    RGBColor(200, 130, 140),
];
const NAMED: [&str; 7] =
    ["round_robin", "least_request", "gie_default", "dynamo_kv", "llmd_precise", "random", "sglang_cache_aware"];

/// Whether a bar or series is infergate's (also `vllm/infergate`, `infergate, 3 replicas`).
pub fn is_ours(name: &str) -> bool {
    name.contains("infergate")
}

/// The colour of `name`, the `index`-th of its chart.
pub fn color_of(name: &str, index: usize) -> RGBColor {
    if is_ours(name) {
        return INFERGATE;
    }
    if name == "oracle" {
        return REFERENCE;
    }
    let slot = NAMED.iter().position(|n| name.ends_with(n)).unwrap_or(index);
    MUTED.get(slot % MUTED.len()).copied().unwrap_or(REFERENCE)
}

/// Registers DejaVu Sans, regular and bold, once: every backend measures its text with
/// it. False when the regular face is not installed (then no PNG is drawn).
pub fn register_fonts() -> bool {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *REGISTERED.get_or_init(|| {
        let dirs = ["/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/TTF"];
        let register = |file: &str, style: FontStyle| {
            dirs.iter().any(|dir| {
                std::fs::read(format!("{dir}/{file}")).is_ok_and(|bytes| {
                    let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                    plotters::style::register_font("sans-serif", style, leaked).is_ok()
                })
            })
        };
        let regular = register("DejaVuSans.ttf", FontStyle::Normal);
        // Without the bold face plotters falls back to the regular one.
        register("DejaVuSans-Bold.ttf", FontStyle::Bold);
        regular
    })
}

/// Text of `px` pixels, bold for infergate, anchored at its left and vertical middle.
pub fn text(px: f64, color: RGBColor, bold: bool) -> TextStyle<'static> {
    let style = if bold { FontStyle::Bold } else { FontStyle::Normal };
    TextStyle {
        font: FontDesc::new(FontFamily::SansSerif, px, style),
        color: color.to_backend_color(),
        pos: Pos::new(HPos::Left, VPos::Center),
    }
}

/// The same text anchored by `h` and `v` instead.
pub fn anchored(style: TextStyle<'static>, h: HPos, v: VPos) -> TextStyle<'static> {
    style.pos(Pos::new(h, v))
}

/// What a chart's values measure, which says how they are written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unit {
    /// Milliseconds: "44.3 ms", "1,588 ms", "18.9 s".
    Millis,
    /// Requests per second: "43.2 req/s".
    PerSecond,
    /// Percent, given as a fraction: 0.903 is "90.3%".
    Percent,
    /// A plain number with this many decimals (an index, a price).
    Plain(usize),
}

impl Unit {
    /// A value's label, as the tables write it.
    pub fn label(self, value: f64) -> String {
        match self {
            Unit::Millis if value >= 10_000.0 => format!("{:.1} s", value / 1000.0),
            Unit::Millis if value >= 100.0 => format!("{} ms", thousands(value.round())),
            Unit::Millis => format!("{value:.1} ms"),
            Unit::PerSecond => format!("{value:.1} req/s"),
            Unit::Percent => format!("{:.1}%", value * 100.0),
            Unit::Plain(decimals) => format!("{value:.decimals$}"),
        }
    }

    /// A tick's label: as short as the value allows; only times carry their unit,
    /// since their axis switches from ms to s.
    pub fn tick(self, value: f64) -> String {
        match self {
            Unit::Millis if value >= 10_000.0 => format!("{} s", short(value / 1000.0)),
            Unit::Millis if value == 0.0 => "0".into(),
            Unit::Millis => format!("{} ms", short(value)),
            Unit::Percent => format!("{}%", short(value * 100.0)),
            Unit::PerSecond | Unit::Plain(_) => short(value),
        }
    }
}

/// `value` with a comma between thousands and no needless decimals: 1,000, 2.5, 0.05.
fn short(value: f64) -> String {
    if (value - value.round()).abs() < 1e-9 {
        return thousands(value.round());
    }
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A whole number with commas between thousands: 19,612.
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.abs());
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    if value < 0.0 { format!("-{out}") } else { out }
}

/// How the value axis maps values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    Linear,
    Log,
}

impl Scale {
    /// Log when the positive values span more than an order of magnitude (45 ms beside
    /// 20 s), linear otherwise (40 beside 60) or when a value is zero or less, which a
    /// log axis cannot show.
    pub fn for_values(values: &[f64]) -> Scale {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let (min, max) = finite.iter().fold((f64::INFINITY, 0.0_f64), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
        if finite.is_empty() || min <= 0.0 || max / min <= 10.0 { Scale::Linear } else { Scale::Log }
    }
}

/// The value axis of a chart: its scale, its range and its ticks. Values are drawn in
/// plot units: the value itself on a linear axis, its log10 on a log one.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueAxis {
    pub scale: Scale,
    pub unit: Unit,
    /// The range in plot units; bars start at `low`.
    pub low: f64,
    pub high: f64,
    /// The labelled ticks and the lighter grid lines between them, in values.
    pub ticks: Vec<f64>,
    pub minor: Vec<f64>,
}

impl ValueAxis {
    /// An axis for `values` that is `length` pixels long, leaving `room` pixels past the
    /// largest value for its label, with a labelled tick at least every `spacing` pixels.
    pub fn fit(values: &[f64], unit: Unit, length: f64, room: f64, spacing: f64) -> ValueAxis {
        let scale = Scale::for_values(values);
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let max = finite.iter().copied().fold(0.0, f64::max);
        let most_ticks = (length / spacing).floor().max(2.0);
        // The largest value ends `room` pixels before the end of the axis.
        let stretch = length / (length - room).max(length / 4.0);
        match scale {
            Scale::Linear => {
                let max = if max > 0.0 { max } else { 1.0 };
                let high = max * stretch;
                let step = nice_step(high / most_ticks);
                let ticks = steps(0.0, high, step);
                let minor = steps(0.0, high, step / 2.0);
                ValueAxis { scale, unit, low: 0.0, high, ticks, minor }
            }
            Scale::Log => {
                let min = finite.iter().copied().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
                // The axis starts on a tick at least a factor of two below the smallest
                // value, so that its bar shows; the ticks are as dense as their labels allow.
                let top = |low: f64| low + (max.log10() - low) * stretch;
                let first = floor_in(min / 2.0, &[1.0, 2.0, 5.0]).log10();
                let decades = top(first) - first;
                let per_decade: &[f64] = if decades * 3.0 <= most_ticks {
                    &[1.0, 2.0, 5.0]
                } else if decades * 2.0 <= most_ticks {
                    &[1.0, 3.0]
                } else {
                    &[1.0]
                };
                let low = floor_in(min / 2.0, per_decade).log10();
                let high = top(low);
                let within = |m: &[f64]| {
                    let mut out = Vec::new();
                    for exponent in (low.floor() as i32)..=(high.ceil() as i32) {
                        for factor in m {
                            let value = factor * 10f64.powi(exponent);
                            if (low - 1e-9..=high + 1e-9).contains(&value.log10()) {
                                out.push(value);
                            }
                        }
                    }
                    out
                };
                let ticks = within(per_decade);
                let minor = within(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
                ValueAxis { scale, unit, low, high, ticks, minor }
            }
        }
    }

    /// Where `value` is drawn, in plot units; values below the axis sit on its start.
    pub fn plot(&self, value: f64) -> f64 {
        match self.scale {
            Scale::Linear => value,
            Scale::Log if value > 0.0 => value.log10().max(self.low),
            Scale::Log => self.low,
        }
    }

    /// The label of the tick at `at`, in plot units.
    pub fn tick_label(&self, at: f64) -> String {
        let value = match self.scale {
            Scale::Linear => at,
            Scale::Log => 10f64.powf(at),
        };
        // Undo the float error of log10 and back: 10^log10(2000) is 1999.9999.
        let rounded = format!("{value:.6e}").parse::<f64>().unwrap_or(value);
        self.unit.tick(rounded)
    }

    /// The axis title: what is measured, its unit, and the scale when it is log.
    pub fn title(&self, metric: &str) -> String {
        let unit = match self.unit {
            Unit::Millis => {
                let top = self.ticks.last().copied().unwrap_or(0.0);
                let bottom = self.ticks.iter().copied().find(|t| *t > 0.0).unwrap_or(0.0);
                if bottom >= 10_000.0 {
                    Some("s")
                } else if top >= 10_000.0 {
                    Some("ms, s")
                } else {
                    Some("ms")
                }
            }
            Unit::PerSecond => Some("req/s"),
            Unit::Percent => Some("%"),
            Unit::Plain(_) => None,
        };
        match (unit, self.scale) {
            (Some(unit), Scale::Linear) => format!("{metric} ({unit})"),
            (Some(unit), Scale::Log) => format!("{metric} ({unit}, log scale)"),
            (None, Scale::Linear) => metric.to_string(),
            (None, Scale::Log) => format!("{metric} (log scale)"),
        }
    }

    /// The axis as a plotters coordinate, in plot units, with its ticks and grid lines.
    pub fn coord(&self) -> Ticked {
        let plot = |values: &[f64]| values.iter().map(|v| self.plot(*v)).collect();
        Ticked { low: self.low, high: self.high, ticks: plot(&self.ticks), minor: plot(&self.minor) }
    }
}

/// A linear plotters coordinate whose ticks and grid lines are given: where the style
/// puts them, not where plotters would.
#[derive(Debug, Clone)]
pub struct Ticked {
    pub low: f64,
    pub high: f64,
    pub ticks: Vec<f64>,
    pub minor: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let share = (value - self.low) / (self.high - self.low);
        let pixels = f64::from(limit.1 - limit.0);
        if !share.is_finite() {
            return limit.0;
        }
        limit.0 + (pixels * share + 1e-3).floor() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() { self.minor.clone() } else { self.ticks.clone() }
    }

    fn range(&self) -> Range<f64> {
        self.low..self.high
    }
}

/// The largest of `mantissas` (ascending, from 1) times a power of ten at or below `value`.
fn floor_in(value: f64, mantissas: &[f64]) -> f64 {
    let power = 10f64.powf(value.log10().floor());
    mantissas.iter().rev().map(|m| m * power).find(|v| *v <= value * (1.0 + 1e-9)).unwrap_or(power)
}

/// The smallest of 1, 2 and 5 times a power of ten at or above `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw > 0.0 && raw.is_finite()) {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * power).find(|step| *step >= raw * (1.0 - 1e-9)).unwrap_or(10.0 * power)
}

/// 0, step, 2 step, … up to `high`.
fn steps(from: f64, high: f64, step: f64) -> Vec<f64> {
    (0..1000u32).map(|i| from + step * f64::from(i)).take_while(|v| *v <= high + step * 1e-9).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_scale_when_values_span_more_than_an_order_of_magnitude() {
        assert_eq!(Scale::for_values(&[45.0, 52.0, 20_000.0]), Scale::Log);
        assert_eq!(Scale::for_values(&[40.0, 60.0]), Scale::Linear);
        assert_eq!(Scale::for_values(&[10.0, 100.0]), Scale::Linear, "exactly 10x is one order");
        assert_eq!(Scale::for_values(&[0.0, 5_000.0]), Scale::Linear, "a zero cannot be shown on a log axis");
        assert_eq!(Scale::for_values(&[]), Scale::Linear);
    }

    #[test]
    fn values_read_in_ms_under_ten_seconds_and_in_s_above() {
        let ms = Unit::Millis;
        assert_eq!(ms.label(44.3), "44.3 ms");
        assert_eq!(ms.label(845.0), "845 ms");
        assert_eq!(ms.label(1587.6), "1,588 ms");
        assert_eq!(ms.label(9_999.4), "9,999 ms");
        assert_eq!(ms.label(18_900.0), "18.9 s");
        assert_eq!(ms.label(130_200.0), "130.2 s");
        assert_eq!(Unit::Percent.label(0.903), "90.3%");
        assert_eq!(Unit::PerSecond.label(43.2), "43.2 req/s");
        assert_eq!(Unit::Plain(3).label(0.99), "0.990");
    }

    #[test]
    fn ticks_are_short_and_times_carry_their_unit() {
        assert_eq!(Unit::Millis.tick(0.0), "0");
        assert_eq!(Unit::Millis.tick(20.0), "20 ms");
        assert_eq!(Unit::Millis.tick(2_000.0), "2,000 ms");
        assert_eq!(Unit::Millis.tick(10_000.0), "10 s");
        assert_eq!(Unit::Millis.tick(100_000.0), "100 s");
        assert_eq!(Unit::Plain(3).tick(0.25), "0.25");
        assert_eq!(Unit::Percent.tick(0.5), "50%");
    }

    #[test]
    fn a_log_axis_starts_below_the_smallest_bar_and_ticks_whole_decades() {
        // The headline: 44.3 ms beside 18.9 s on 700 pixels, 90 of them for the label.
        let axis = ValueAxis::fit(&[44.3, 51.9, 18_900.0], Unit::Millis, 700.0, 90.0, 70.0);
        assert_eq!(axis.scale, Scale::Log);
        // Ticks at 1 and 3 per decade fit 70 pixels apart; the axis starts on one, at
        // least 2x below the smallest bar.
        assert_eq!(axis.ticks, vec![10.0, 30.0, 100.0, 300.0, 1_000.0, 3_000.0, 10_000.0, 30_000.0]);
        assert_eq!(axis.low, 1.0);
        assert!(axis.high > 18_900f64.log10(), "room for the largest bar's label");
        assert_eq!(axis.tick_label(axis.plot(1_000.0)), "1,000 ms");
        assert_eq!(axis.tick_label(axis.plot(10_000.0)), "10 s");
        assert_eq!(axis.title("TTFT p90"), "TTFT p90 (ms, s, log scale)");
        // The largest value's end leaves the label its 90 of the 700 pixels.
        let end = (axis.plot(18_900.0) - axis.low) / (axis.high - axis.low) * 700.0;
        assert!((end - 610.0).abs() < 0.5, "{end}");
    }

    #[test]
    fn a_tall_log_axis_ticks_one_two_five_from_below_the_smallest_value() {
        let axis = ValueAxis::fit(&[129.0, 11_400.0], Unit::Millis, 476.0, 26.0, 34.0);
        assert_eq!(axis.low, 50f64.log10());
        assert_eq!(axis.ticks, vec![50.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0]);
    }

    #[test]
    fn a_linear_axis_starts_at_zero_with_round_steps() {
        let axis = ValueAxis::fit(&[40.0, 60.0], Unit::Millis, 700.0, 0.0, 70.0);
        assert_eq!(axis.scale, Scale::Linear);
        assert_eq!((axis.low, axis.high), (0.0, 60.0));
        assert_eq!(axis.ticks, vec![0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0]);
        assert_eq!(axis.title("TTFT p90"), "TTFT p90 (ms)");
        assert_eq!(axis.plot(45.0), 45.0);
    }

    #[test]
    fn infergate_stands_out_and_a_peer_keeps_its_colour_across_charts() {
        assert_eq!(color_of("infergate", 7), INFERGATE);
        assert_eq!(color_of("vllm/infergate", 0), INFERGATE);
        assert_eq!(color_of("infergate, 2 replicas", 3), INFERGATE);
        assert_eq!(color_of("round_robin", 0), color_of("vllm/round_robin", 1));
        assert_ne!(color_of("round_robin", 0), color_of("least_request", 1));
        assert!(is_ours("infergate") && !is_ours("oracle"));
    }
}
