//! `trace-replay`: a recorded request trace replayed against 8 pods, in the format of
//! the Mooncake traces (FAST'25): JSONL, one request per line,
//! `{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [..]}`,
//! where each id names one 512-token block of the prompt and an equal id at an equal
//! position means an identical prefix up to and including that block.
//!
//! A trace holds no text, so each block's text is made from its id alone: equal ids
//! give equal bytes, and both the router's character-block hashes and the engine's
//! prefix cache see the reuse the trace records. A load step's x value is the replay
//! speed: a request recorded at `t` ms arrives at `t / 1000 / speed` seconds.

use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use infergate_core::wire::CHARS_PER_TOKEN;
use infergate_model_sim::engine::EngineProfile;
use serde::Deserialize;
use xxhash_rust::xxh64::xxh64;

use super::{BASE_MODEL, CalibrationPlan, LoadStep, Scenario, Workload};
use crate::request::{Arrival, BenchRequest, render, text};

/// Tokens per trace block (Mooncake's block size).
pub const TRACE_BLOCK_TOKENS: usize = 512;
/// Prompt bytes per trace block: 2,048, a multiple of the router's 64-character hash
/// block and of the engine's 16-token KV block (64 bytes), so that trace blocks, router
/// blocks and KV blocks start at the same bytes.
const BLOCK_BYTES: usize = TRACE_BLOCK_TOKENS * CHARS_PER_TOKEN;
/// Seeds the text of a block named by an id, and of a block the trace names not.
const ID_SALT: u64 = 0x7472_6163_655f_6964;
const FILLER_SALT: u64 = 0x7472_6163_655f_6669;

/// The pods' engine: Llama-3.1-8B on one H100, with prefill attention and KV reads that
/// grow with context (docs/model-sim.md, "Long context"): this trace's prompts reach
/// 126k tokens, where attention is three quarters of a prefill. Its KV cache, 26,674
/// blocks of 16 tokens (426,784 tokens), holds the trace's longest request (126,195
/// prompt tokens + 332 output, 7,909 blocks) three times over; the engine model has no
/// other length limit, and Llama-3.1's 131,072-token context admits it too. The 16-token
/// block is the router's 64-character block, so both count reuse alike. A trace line
/// that would not fit in an empty pod is refused at load time, since the engine would
/// wait for room forever.
const PROFILE: EngineProfile = EngineProfile::LLAMA_3_1_8B_H100_LONG;
const PODS: usize = 8;

/// One request of the trace, as recorded.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TraceRecord {
    /// Arrival, milliseconds from the start of the trace.
    pub timestamp: f64,
    pub input_length: u32,
    pub output_length: u32,
    /// One id per 512-token prompt block; blocks past the list get text of their own.
    pub hash_ids: Vec<u64>,
}

/// Why a trace could not be loaded; names the file and, for a bad line, its number.
#[derive(Debug)]
pub enum TraceError {
    Read { path: PathBuf, error: std::io::Error },
    Line { path: PathBuf, line: usize, reason: String },
    Empty { path: PathBuf },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Read { path, error } => write!(f, "cannot read trace {}: {error}", path.display()),
            TraceError::Line { path, line, reason } => write!(f, "{}:{line}: {reason}", path.display()),
            TraceError::Empty { path } => write!(f, "trace {} holds no request", path.display()),
        }
    }
}

impl std::error::Error for TraceError {}

pub struct TraceReplay {
    path: PathBuf,
    records: Vec<TraceRecord>,
    /// The load steps: replay speeds, 1.0 as recorded.
    pub speeds: Vec<f64>,
    /// Only requests recorded in the first this-many seconds; `None`: the whole trace.
    pub window_s: Option<f64>,
}

impl TraceReplay {
    pub const NAME: &'static str = "trace-replay";

    /// Reads and checks every line of the trace at `path` (blank lines are skipped).
    pub fn load(path: &Path, speeds: Vec<f64>, window_s: Option<f64>) -> Result<Self, TraceError> {
        let read_error = |error| TraceError::Read { path: path.to_path_buf(), error };
        let file = std::fs::File::open(path).map_err(read_error)?;
        let mut records = Vec::new();
        for (index, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line_error = |reason: String| TraceError::Line { path: path.to_path_buf(), line: index + 1, reason };
            let line = line.map_err(|e| line_error(e.to_string()))?;
            if line.trim().is_empty() {
                continue;
            }
            let record: TraceRecord = serde_json::from_str(&line).map_err(|e| line_error(e.to_string()))?;
            check(&record).map_err(line_error)?;
            records.push(record);
        }
        if records.is_empty() {
            return Err(TraceError::Empty { path: path.to_path_buf() });
        }
        Ok(Self { path: path.to_path_buf(), records, speeds, window_s })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// The records replayed, those recorded inside the window, with their trace index.
    pub fn replayed(&self) -> impl Iterator<Item = (usize, &TraceRecord)> {
        let end_ms = self.window_s.map_or(f64::INFINITY, |w| w * 1000.0);
        self.records.iter().enumerate().filter(move |(_, r)| r.timestamp < end_ms)
    }
}

/// A record the replay can run: a real arrival time, a prompt, room in an empty pod.
fn check(record: &TraceRecord) -> Result<(), String> {
    if !record.timestamp.is_finite() || record.timestamp < 0.0 {
        return Err(format!("timestamp {} is not a time in ms from the start", record.timestamp));
    }
    if record.input_length == 0 {
        return Err("input_length is 0".into());
    }
    let block = u64::from(PROFILE.block_size);
    let blocks = u64::from(record.input_length).div_ceil(block) + u64::from(record.output_length).div_ceil(block);
    if blocks > PROFILE.num_gpu_blocks {
        return Err(format!(
            "{} + {} tokens need {blocks} KV blocks; a simulated pod holds {}",
            record.input_length, record.output_length, PROFILE.num_gpu_blocks
        ));
    }
    Ok(())
}

/// The text of trace block `id`, the same wherever it occurs.
fn id_text(id: u64) -> String {
    text(&mut fastrand::Rng::with_seed(xxh64(&id.to_le_bytes(), ID_SALT)), BLOCK_BYTES)
}

/// The prompt of the trace's request `index`: one user message, rendered as the gateway
/// does, of exactly `input_length × 4` bytes (never less than its 8-byte header), so the
/// engine counts `input_length` tokens.
/// Trace block `b` is bytes `[2048 b, 2048 (b + 1))` of the rendered prompt, the same
/// bytes of its id's text; the message header takes the first bytes of block 0, and the
/// last block is cut at the prompt's end.
pub fn prompt(record: &TraceRecord, index: usize) -> Vec<u8> {
    let total = record.input_length as usize * CHARS_PER_TOKEN;
    let header = render(&[("user", "")]).len();
    let mut content = String::with_capacity(total.saturating_sub(header));
    for block in 0..total.div_ceil(BLOCK_BYTES) {
        let start = block * BLOCK_BYTES;
        let (from, to) = (header.max(start) - start, total.min(start + BLOCK_BYTES) - start);
        if from >= to {
            continue;
        }
        let block_text = match record.hash_ids.get(block) {
            Some(&id) => id_text(id),
            None => {
                let seed = xxh64(&(index as u64).to_le_bytes(), FILLER_SALT ^ block as u64);
                text(&mut fastrand::Rng::with_seed(seed), BLOCK_BYTES)
            }
        };
        content.push_str(block_text.get(from..to).unwrap_or_default());
    }
    render(&[("user", &content)])
}

impl Workload for TraceReplay {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn steps(&self) -> Vec<LoadStep> {
        self.speeds.iter().map(|&qps| LoadStep { qps }).collect()
    }

    /// The same requests at every step and seed (the text depends on the ids only);
    /// only their arrival times scale with the speed.
    fn scenario(&self, step: LoadStep, _seed: u64) -> Scenario {
        let speed = step.qps.max(1e-9);
        let requests: Vec<BenchRequest> = self
            .replayed()
            .map(|(index, record)| BenchRequest {
                arrival: Arrival::At(record.timestamp / 1000.0 / speed),
                model: BASE_MODEL.into(),
                adapter: None,
                prompt: prompt(record, index).into(),
                output_tokens: record.output_length,
                session: None,
            })
            .collect();
        let last_ms = self.replayed().map(|(_, r)| r.timestamp).fold(0.0, f64::max);
        let span_s = self.window_s.unwrap_or(last_ms / 1000.0);
        Scenario {
            pods: PODS,
            profile: PROFILE,
            adapters: Vec::new(),
            requests,
            duration_s: span_s / speed,
            calibration: CalibrationPlan::NONE,
        }
    }
}

#[cfg(test)]
mod tests {
    use infergate_core::config::PrefixSettings;
    use infergate_core::prefix::PromptHashes;
    use infergate_model_sim::engine::{SimRequest, block_hashes};

    use super::*;

    /// Writes `lines` to a file of its own under the temp dir and loads it.
    fn load(name: &str, lines: &[&str], speeds: Vec<f64>, window_s: Option<f64>) -> Result<TraceReplay, TraceError> {
        let path = std::env::temp_dir().join(format!("infergate-trace-{}-{name}.jsonl", std::process::id()));
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let loaded = TraceReplay::load(&path, speeds, window_s);
        std::fs::remove_file(&path).unwrap();
        loaded
    }

    const TRACE: [&str; 4] = [
        r#"{"timestamp": 0, "input_length": 1500, "output_length": 10, "hash_ids": [1, 2, 3]}"#,
        r#"{"timestamp": 1500, "input_length": 1300, "output_length": 20, "hash_ids": [1, 2, 4]}"#,
        "",
        r#"{"timestamp": 3000, "input_length": 700, "output_length": 30, "hash_ids": [5, 6], "extra": true}"#,
    ];

    #[test]
    fn equal_ids_give_equal_prefixes_that_router_and_engine_both_see() {
        let trace = load("prefixes", &TRACE, vec![1.0], None).unwrap();
        let requests = trace.scenario(LoadStep { qps: 1.0 }, 7).requests;
        let (a, b, c) = (&requests[0].prompt.bytes(), &requests[1].prompt.bytes(), &requests[2].prompt.bytes());
        assert_eq!(a[..2 * BLOCK_BYTES], b[..2 * BLOCK_BYTES]);
        assert_ne!(a[2 * BLOCK_BYTES..2 * BLOCK_BYTES + 64], b[2 * BLOCK_BYTES..2 * BLOCK_BYTES + 64]);
        assert_ne!(a[..BLOCK_BYTES], c[..BLOCK_BYTES]);
        assert!(a.starts_with(b"<|user|>"));
        // Two shared 512-token blocks: 64 engine blocks of 16 tokens, 64 router blocks.
        let (ea, eb) = (block_hashes(a, None, 16), block_hashes(b, None, 16));
        assert_eq!(ea[..64], eb[..64]);
        assert_ne!(ea[64], eb[64]);
        let keys = |text| PromptHashes::of_messages(text, &PrefixSettings::default()).salted(BASE_MODEL, None).keys;
        let (ra, rb) = (keys(a), keys(b));
        assert_eq!(ra[..64], rb[..64]);
        assert_ne!(ra[64], rb[64]);
    }

    #[test]
    fn prompts_are_input_length_tokens_and_runs_repeat() {
        let trace = load("lengths", &TRACE, vec![1.0], None).unwrap();
        let scenario = trace.scenario(LoadStep { qps: 1.0 }, 7);
        for (request, record) in scenario.requests.iter().zip(trace.records()) {
            assert_eq!(request.prompt.len(), record.input_length as usize * 4);
            let sim = SimRequest::from_text(0, 0.0, &request.prompt.bytes(), request.output_tokens, None, 16);
            assert_eq!(sim.prompt_tokens, record.input_length);
            assert_eq!(request.output_tokens, record.output_length);
        }
        assert_eq!(scenario.requests, trace.scenario(LoadStep { qps: 1.0 }, 8).requests);
        // Blocks the trace names not get text of their own request.
        let unnamed = TraceRecord { timestamp: 0.0, input_length: 600, output_length: 1, hash_ids: Vec::new() };
        assert_eq!(prompt(&unnamed, 0).len(), 2_400);
        assert_eq!(prompt(&unnamed, 0), prompt(&unnamed, 0));
        assert_ne!(prompt(&unnamed, 0), prompt(&unnamed, 1));
    }

    #[test]
    fn arrival_is_timestamp_over_speed_within_the_window() {
        let trace = load("arrivals", &TRACE, vec![2.0], Some(2.0)).unwrap();
        let scenario = trace.scenario(trace.steps()[0], 7);
        let arrivals: Vec<Arrival> = scenario.requests.iter().map(|r| r.arrival).collect();
        assert_eq!(arrivals, [Arrival::At(0.0), Arrival::At(0.75)]);
        assert_eq!(scenario.duration_s, 1.0);
        let whole = load("whole", &TRACE, vec![4.0], None).unwrap().scenario(LoadStep { qps: 4.0 }, 7);
        assert_eq!(whole.requests.len(), 3);
        assert_eq!(whole.requests[2].arrival, Arrival::At(0.75));
        assert_eq!(whole.duration_s, 0.75);
    }

    /// The conversation trace, when it is there: every line loads, and the quick window's
    /// prompts are as long as recorded.
    #[test]
    fn the_mooncake_conversation_trace_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces/mooncake-conversation.jsonl");
        if !path.is_file() {
            eprintln!("skipped: no trace at {}", path.display());
            return;
        }
        let trace = TraceReplay::load(&path, vec![1.0], Some(60.0)).unwrap();
        assert_eq!(trace.records().len(), 12_031);
        assert_eq!(trace.records().iter().map(|r| r.input_length).max(), Some(126_195));
        let scenario = trace.scenario(LoadStep { qps: 1.0 }, 7);
        assert_eq!(scenario.requests.len(), trace.replayed().count());
        let bytes: usize = scenario.requests.iter().map(|r| r.prompt.len()).sum();
        let tokens: usize = trace.replayed().map(|(_, r)| r.input_length as usize).sum();
        assert_eq!(bytes, tokens * 4);
    }

    #[test]
    fn a_bad_line_is_named() {
        let lines = [TRACE[0], TRACE[1], r#"{"timestamp": 5, "input_length": "many"}"#];
        let error = load("bad", &lines, vec![1.0], None).err().unwrap().to_string();
        assert!(error.contains("infergate-trace-") && error.contains("-bad.jsonl:3: "), "{error}");
        let missing = [r#"{"timestamp": 5, "input_length": 10, "output_length": 1}"#];
        let error = load("missing", &missing, vec![1.0], None).err().unwrap().to_string();
        assert!(error.contains(":1: missing field `hash_ids`"), "{error}");
        let huge = [r#"{"timestamp": 5, "input_length": 500000, "output_length": 1, "hash_ids": []}"#];
        let error = load("huge", &huge, vec![1.0], None).err().unwrap().to_string();
        assert!(error.contains(":1: 500000 + 1 tokens need"), "{error}");
        assert!(matches!(load("empty", &[""], vec![1.0], None), Err(TraceError::Empty { .. })));
        let absent = TraceReplay::load(Path::new("/nonexistent/trace.jsonl"), vec![1.0], None);
        assert!(absent.err().unwrap().to_string().contains("/nonexistent/trace.jsonl"));
    }
}
