//! Drives kubernetes-sigs `inference-perf`, the load generator of the Gateway API
//! Inference Extension's benchmarks, as a client we did not write: its `shared_prefix`
//! workload at a constant rate, streamed, against one gateway. `make inference-perf`
//! (engines/inference-perf/setup.sh) installs it; its README says what the report
//! fields mean.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use infergate_harness::artifacts::workspace_root;

/// The config template, with `@NAME@` placeholders.
const TEMPLATE: &str = include_str!("../../engines/inference-perf/shared-prefix.yaml.template");

/// The `shared_prefix` workload: groups of prompts that share a system prompt.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct SharedPrefix {
    pub groups: u32,
    pub prompts_per_group: u32,
    /// Tokens of each group's shared system prompt.
    pub system_prompt_tokens: u32,
    /// Tokens of each prompt's own question.
    pub question_tokens: u32,
    pub output_tokens: u32,
    /// Requests per second, sent for `duration_s`.
    pub rate: f64,
    pub duration_s: u32,
    pub seed: u64,
}

impl SharedPrefix {
    /// The filled-in config for a run against `base_url`, reporting into `out`.
    pub fn config(&self, base_url: &str, tokenizer: &Path, out: &Path) -> String {
        [
            ("BASE_URL", base_url.to_string()),
            ("TOKENIZER_DIR", tokenizer.display().to_string()),
            ("NUM_GROUPS", self.groups.to_string()),
            ("PROMPTS_PER_GROUP", self.prompts_per_group.to_string()),
            ("SYSTEM_PROMPT_LEN", self.system_prompt_tokens.to_string()),
            ("QUESTION_LEN", self.question_tokens.to_string()),
            ("OUTPUT_LEN", self.output_tokens.to_string()),
            ("SEED", self.seed.to_string()),
            ("RATE", self.rate.to_string()),
            ("DURATION", self.duration_s.to_string()),
            // One sending process besides the main one: on 2 cores, every process the
            // client adds is CPU the engines lose.
            ("NUM_WORKERS", "1".to_string()),
            ("OUTPUT_DIR", out.display().to_string()),
        ]
        .iter()
        .fold(TEMPLATE.to_string(), |text, (name, value)| text.replace(&format!("@{name}@"), value))
    }
}

/// Median, p90, p99 and mean of one latency, in milliseconds.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
}

/// What inference-perf's `summary_lifecycle_metrics.json` says of one run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Summary {
    pub sent: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Each distinct failure message with its count.
    pub failures: Vec<(String, u64)>,
    pub ttft_ms: Percentiles,
    /// Time per output token, ms.
    pub tpot_ms: Percentiles,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
}

/// The installed `inference-perf` and the tokenizer it reads, or how to install them.
pub fn installed() -> Result<(PathBuf, PathBuf), String> {
    let root = workspace_root();
    let binary = root.join(".venv-inference-perf/bin/inference-perf");
    let tokenizer = root.join(".cache/models/smollm2-135m-instruct");
    if !binary.exists() {
        return Err(format!("{} is missing: run `make inference-perf`", binary.display()));
    }
    if !tokenizer.join("tokenizer.json").exists() {
        return Err(format!("the SmolLM2 tokenizer is missing from {}: run `make vllm`", tokenizer.display()));
    }
    Ok((binary, tokenizer))
}

/// Runs one workload against `base_url`; its config, log and reports go to `out`.
pub async fn run(workload: &SharedPrefix, base_url: &str, out: &Path, label: &str) -> Result<Summary, String> {
    let (binary, tokenizer) = installed()?;
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let config = out.join("inference-perf.yaml");
    std::fs::write(&config, workload.config(base_url, &tokenizer, &out.join("report")))
        .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
    let log_path = out.join("inference-perf.log");
    let log = std::fs::File::create(&log_path).map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
    let log_err = log.try_clone().map_err(|e| e.to_string())?;
    let mut child = tokio::process::Command::new(&binary)
        .arg("--config_file")
        .arg(&config)
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    // The stage, plus about 15 s of start-up, drain and report writing.
    let expected = Duration::from_secs(u64::from(workload.duration_s) + 15);
    let bar = ProgressBar::new(expected.as_secs());
    bar.set_style(
        ProgressStyle::with_template("{prefix:>32} [{bar:30}] {pos}/{len} s")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    let started = Instant::now();
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(|e| e.to_string())?,
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                bar.set_position(started.elapsed().as_secs().min(expected.as_secs()));
            }
        }
    };
    bar.finish_and_clear();
    if !status.success() {
        return Err(format!("inference-perf exited with {status}; see {}", log_path.display()));
    }
    let report = out.join("report/summary_lifecycle_metrics.json");
    let text = std::fs::read_to_string(&report)
        .map_err(|e| format!("inference-perf wrote no {} ({e}); see {}", report.display(), log_path.display()))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", report.display()))?;
    Ok(summary(&json))
}

/// Reads the summary report. Latencies are in seconds there; the 50th percentile is
/// `median`. A distribution without samples is `null`: 0 here, with `succeeded` 0.
pub fn summary(json: &Value) -> Summary {
    let number = |path: &[&str]| path.iter().fold(json, |v, key| &v[*key]).as_f64().unwrap_or(0.0);
    let ms = |metric: &str| Percentiles {
        p50: number(&["successes", "latency", metric, "median"]) * 1000.0,
        p90: number(&["successes", "latency", metric, "p90"]) * 1000.0,
        p99: number(&["successes", "latency", metric, "p99"]) * 1000.0,
        mean: number(&["successes", "latency", metric, "mean"]) * 1000.0,
    };
    let failures = json["failures"]["by_label"]
        .as_object()
        .map(|labels| labels.iter().map(|(label, v)| (label.clone(), v["count"].as_u64().unwrap_or(0))).collect())
        .unwrap_or_default();
    Summary {
        sent: number(&["load_summary", "count"]) as u64,
        succeeded: number(&["successes", "count"]) as u64,
        failed: number(&["failures", "count"]) as u64,
        failures,
        ttft_ms: ms("time_to_first_token"),
        tpot_ms: ms("time_per_output_token"),
        requests_per_s: number(&["successes", "throughput", "requests_per_sec"]),
        output_tokens_per_s: number(&["successes", "throughput", "output_tokens_per_sec"]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled() {
        let workload = SharedPrefix {
            groups: 8,
            prompts_per_group: 16,
            system_prompt_tokens: 1000,
            question_tokens: 64,
            output_tokens: 32,
            rate: 1.5,
            duration_s: 60,
            seed: 7,
        };
        let text = workload.config("http://127.0.0.1:1", Path::new("/tok"), Path::new("/out"));
        let settings: String = text.lines().filter(|l| !l.trim_start().starts_with('#')).collect();
        assert!(!settings.contains('@'), "a placeholder is left: {text}");
        assert!(text.contains("rate: 1.5") && text.contains("num_groups: 8"), "{text}");
    }

    #[test]
    fn the_summary_is_read_from_its_documented_paths() {
        let json = serde_json::json!({
            "load_summary": {"count": 40},
            "successes": {
                "count": 39,
                "latency": {"time_to_first_token": {"median": 0.1, "p90": 0.25, "p99": 0.5},
                            "time_per_output_token": {"median": 0.01, "p90": 0.02, "p99": 0.03}},
                "throughput": {"requests_per_sec": 1.9, "output_tokens_per_sec": 61.0}
            },
            "failures": {"count": 1, "by_label": {"503 - Service Unavailable": {"count": 1}}}
        });
        let s = summary(&json);
        assert_eq!((s.sent, s.succeeded, s.failed), (40, 39, 1));
        assert_eq!((s.ttft_ms.p50, s.ttft_ms.p90, s.ttft_ms.p99), (100.0, 250.0, 500.0));
        assert_eq!(s.failures, [("503 - Service Unavailable".to_string(), 1)]);
    }
}
