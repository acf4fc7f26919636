//! A parser for the Prometheus text exposition format (version 0.0.4).
//!
//! Hand-written because the maintained candidates do not fit: `prometheus-parse`
//! matches metric names with `\w+`, so it drops every `vllm:`/`sglang:` family (the
//! colon is legal and is what the engines use), and its label regex breaks on a `}`
//! inside a quoted value; `openmetrics-parser` is LGPL-3.0. This one handles escapes in
//! label values, optional timestamps, NaN and ±Inf, comments, and families in any order.

use std::borrow::Cow;

/// Label pairs in the order they appear. Values borrow from the text unless they hold
/// escapes: at 10,000 scrapes a second, allocations are most of the parsing cost.
pub type Labels<'a> = Vec<(&'a str, Cow<'a, str>)>;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    pub name: &'a str,
    pub labels: Labels<'a>,
    pub value: f64,
    pub timestamp_ms: Option<i64>,
}

impl Sample<'_> {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_ref())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ExpositionError {
    pub line: usize,
    pub message: String,
}

/// Parses every sample; `# HELP`, `# TYPE` and other comments are skipped.
pub fn parse(text: &str) -> Result<Vec<Sample<'_>>, ExpositionError> {
    parse_where(text, |_| true)
}

/// Parses the samples whose metric name passes `wanted`; other lines are skipped
/// without parsing their labels or value (so they are not checked either).
pub fn parse_where(text: &str, wanted: impl Fn(&str) -> bool) -> Result<Vec<Sample<'_>>, ExpositionError> {
    let mut samples = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(|c: char| !is_name_char(c)).unwrap_or(line.len());
        if !wanted(&line[..name_end]) {
            continue;
        }
        let sample = parse_sample(line).map_err(|message| ExpositionError { line: index + 1, message })?;
        samples.push(sample);
    }
    Ok(samples)
}

/// The metric families the text declares with `# TYPE name kind`, sampled or not: a
/// Prometheus client declares a labelled family at start but writes no sample until it
/// is first set, so a fresh pod can declare gauges it has no value for yet.
pub fn declared(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter_map(|line| line.trim().strip_prefix("# TYPE ")?.split_whitespace().next())
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    is_name_start(c) || c.is_ascii_digit()
}

fn parse_sample(line: &str) -> Result<Sample<'_>, String> {
    let name_end = line.find(|c: char| !is_name_char(c)).unwrap_or(line.len());
    let name = &line[..name_end];
    if !name.starts_with(is_name_start) {
        return Err(format!("invalid metric name in {line:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        let (parsed, remaining) = parse_labels(after_brace)?;
        labels = parsed;
        rest = remaining;
    }
    let mut fields = rest.split_whitespace();
    let value_text = fields.next().ok_or_else(|| format!("missing value for {name}"))?;
    let value = parse_value(value_text).ok_or_else(|| format!("invalid value {value_text:?} for {name}"))?;
    let timestamp_ms = match fields.next() {
        Some(ts) => Some(ts.parse::<i64>().map_err(|_| format!("invalid timestamp {ts:?} for {name}"))?),
        None => None,
    };
    if fields.next().is_some() {
        return Err(format!("unexpected text after the sample of {name}"));
    }
    Ok(Sample { name, labels, value, timestamp_ms })
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => text.parse().ok(),
    }
}

/// Parses `name="value",...}` and returns the labels and the text after `}`.
fn parse_labels(mut text: &str) -> Result<(Labels<'_>, &str), String> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start();
        if let Some(rest) = text.strip_prefix('}') {
            return Ok((labels, rest));
        }
        let name_end = text.find(|c: char| !is_name_char(c)).unwrap_or(text.len());
        let name = &text[..name_end];
        if name.is_empty() {
            return Err("expected a label name".to_string());
        }
        text = text[name_end..].trim_start();
        text = text.strip_prefix('=').ok_or_else(|| format!("expected '=' after label {name}"))?;
        text = text.trim_start().strip_prefix('"').ok_or_else(|| format!("expected '\"' to open label {name}"))?;
        let (value, close) = label_value(text).ok_or_else(|| format!("unterminated value of label {name}"))?;
        labels.push((name, value));
        text = text[close + 1..].trim_start();
        if let Some(rest) = text.strip_prefix(',') {
            text = rest;
        } else if !text.starts_with('}') {
            return Err(format!("expected ',' or '}}' after label {name}"));
        }
    }
}

/// The value of a label that starts `text` (after its opening quote), unescaped, and
/// the index of its closing quote.
fn label_value(text: &str) -> Option<(Cow<'_, str>, usize)> {
    let end = text.find(['"', '\\'])?;
    if text[end..].starts_with('"') {
        return Some((Cow::Borrowed(&text[..end]), end));
    }
    let mut value = String::from(&text[..end]);
    let mut chars = text[end..].char_indices();
    loop {
        match chars.next()? {
            (i, '"') => return Some((Cow::Owned(value), end + i)),
            (_, '\\') => match chars.next()? {
                (_, 'n') => value.push('\n'),
                (_, other) => value.push(other),
            },
            (_, c) => value.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_colons_and_labels() {
        let s = parse("vllm:num_requests_waiting{engine=\"0\",model_name=\"Qwen/Qwen3-0.6B\"} 3.0\n").unwrap();
        assert_eq!(s[0].name, "vllm:num_requests_waiting");
        assert_eq!(s[0].label("model_name"), Some("Qwen/Qwen3-0.6B"));
        assert_eq!(s[0].value, 3.0);
    }

    #[test]
    fn escapes_braces_and_commas_inside_values() {
        let s = parse(r#"m{a="x\"y}",b="line\nnext",c="back\\slash",} 1"#).unwrap();
        assert_eq!(s[0].label("a"), Some("x\"y}"));
        assert_eq!(s[0].label("b"), Some("line\nnext"));
        assert_eq!(s[0].label("c"), Some("back\\slash"));
    }

    #[test]
    fn special_values_and_timestamps() {
        let s = parse("a NaN\nb +Inf 1700000000000\nc -Inf\nd 1.7382173358407154e+09\n").unwrap();
        assert!(s[0].value.is_nan());
        assert_eq!((s[1].value, s[1].timestamp_ms), (f64::INFINITY, Some(1_700_000_000_000)));
        assert_eq!(s[2].value, f64::NEG_INFINITY);
        assert!((s[3].value - 1.738_217_335_840_715_4e9).abs() < 1.0);
    }

    #[test]
    fn errors_name_the_line() {
        let err = parse("# HELP a b\na 1\nb{x=\"open} 2\n").unwrap_err();
        assert_eq!(err.line, 3);
        assert!(parse("9bad 1").is_err());
        assert!(parse("a notanumber").is_err());
    }

    #[test]
    fn every_recorded_sample_parses() {
        for text in [
            include_str!("../tests/data/vllm-v1_qwen3-0.6b.txt"),
            include_str!("../tests/data/vllm-v0_qwen2.5-coder-1.5b.txt"),
            include_str!("../tests/data/sglang_qwen3-0.6b.txt"),
            include_str!("../tests/data/triton-trtllm_inflight-batcher.txt"),
        ] {
            let samples = parse(text).unwrap();
            assert!(samples.len() > 10);
        }
    }
}
