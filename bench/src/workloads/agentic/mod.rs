//! `agentic`: real coding-agent sessions as a fleet's traffic. Each file of the
//! directory is one recorded Claude Code session (the format of kv-cache-tester's
//! traces, see ../shared/traces/agentic/SOURCES.md): its calls in order, each with its
//! input and output tokens, one id per 64-token prompt block (an equal id at an equal
//! position is an equal prefix), and the client's think time before it; sub-agents'
//! calls are nested under a marker.
//!
//! A load step is N sessions at once. Each of N users plays sessions back to back from
//! a shuffled list of the files, starting at a random time within the first
//! [`Agentic::stagger_s`]; each call follows the answer to the one before it after its
//! recorded think time (closed loop), and a user's next session starts as soon as its
//! last one ends. Sub-agent calls are played where their marker is, in order. The
//! trace's think times run to 21 hours (a user away); a gap longer than
//! [`MAX_THINK_S`] is cut to it, and the workload says how many were.
//!
//! Block ids are local to a file, and a file played twice (by two users, or one user
//! twice) is two sessions: each session's blocks get text of their own, from the id and
//! the session. What the sessions of one agent do share is its tool definitions, the
//! first `tool_tokens` of every prompt: sessions whose tool definitions are the same
//! size are taken to have the same tools, and those blocks get the same text. (The
//! system prompt that follows holds each session's working directory and environment,
//! and is not shared.) The trace does not record this sharing; kv-cache-tester's replay
//! models it the same way (its `--warm-prefix-pct`).
//!
//! The pods are Llama-3.1-8B on H100s with an FP8 KV cache (853,568 tokens each; see
//! docs/model-sim.md): the sessions' prompts average 122k tokens, so one session's
//! context takes a seventh of a pod's cache. A session with a call that would not fit
//! in an empty pod is left out at load time, named.

mod scaled;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use infergate_core::wire::CHARS_PER_TOKEN;
use infergate_model_sim::engine::EngineProfile;
use serde::Deserialize;
use xxhash_rust::xxh64::xxh64;

use super::{BASE_MODEL, CalibrationPlan, LoadStep, Scenario, Workload};
use crate::request::{Arrival, BenchRequest, BlockLibrary, BlockPrompt, Prompt, render};

pub use scaled::{Scaling, scaled};

/// The pods' engine (see the module doc).
const PROFILE: EngineProfile = EngineProfile::LLAMA_3_1_8B_H100_FP8_KV;
const PODS: usize = 8;
/// A think time longer than this (a user away) is cut to it, seconds.
pub const MAX_THINK_S: f64 = 60.0;
/// Calls a user plays at most in one run, whatever the think times.
const MAX_CALLS_PER_USER: usize = 5_000;
/// Seeds of the sessions' block texts and of the shared tool definitions.
const SESSION_SALT: u64 = 0x6167_656e_7469_6373;
const TOOLS_SALT: u64 = 0x6167_656e_746f_6f6c;

/// One call of a session, as the fleet sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// One id per full block of the prompt.
    pub hash_ids: Vec<u64>,
    /// The client's delay before it, cut to [`MAX_THINK_S`].
    pub think_s: f64,
    /// The prompt's leading tokens that are the agent's tool definitions.
    pub tool_tokens: u32,
}

/// One recorded session.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    pub name: String,
    pub calls: Vec<Call>,
}

/// Why the sessions could not be loaded; names the file.
#[derive(Debug)]
pub enum AgenticError {
    Read { path: PathBuf, error: std::io::Error },
    Parse { path: PathBuf, error: serde_json::Error },
    Invalid { path: PathBuf, reason: String },
    Empty { dir: PathBuf },
}

impl fmt::Display for AgenticError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgenticError::Read { path, error } => write!(f, "cannot read {}: {error}", path.display()),
            AgenticError::Parse { path, error } => write!(f, "{}: {error}", path.display()),
            AgenticError::Invalid { path, reason } => write!(f, "{}: {reason}", path.display()),
            AgenticError::Empty { dir } => {
                write!(f, "{} holds no session (trace_*.json) that fits a pod", dir.display())
            }
        }
    }
}

impl std::error::Error for AgenticError {}

/// A file as written.
#[derive(Deserialize)]
struct TraceFile {
    block_size: u32,
    #[serde(default)]
    tool_tokens: u32,
    requests: Vec<Entry>,
}

/// A call, or a sub-agent's marker with its own calls.
#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "type")]
    kind: String,
    #[serde(rename = "in", default)]
    input: Option<u32>,
    #[serde(default)]
    out: Option<u32>,
    #[serde(default)]
    hash_ids: Option<Vec<u64>>,
    #[serde(default)]
    think_time: Option<f64>,
    #[serde(default)]
    tool_tokens: Option<u32>,
    #[serde(default)]
    requests: Option<Vec<Entry>>,
}

/// Counts of what loading changed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LoadNotes {
    /// Think times longer than [`MAX_THINK_S`], cut to it.
    pub compressed_gaps: usize,
    /// Calls without a think time, played at once.
    pub missing_think: usize,
}

pub struct Agentic {
    dir: PathBuf,
    sessions: Vec<Session>,
    /// Files left out, with why.
    pub skipped: Vec<(String, String)>,
    pub notes: LoadNotes,
    /// The load steps: sessions at once.
    pub counts: Vec<f64>,
    /// Calls are sent for this long; the run ends when the last sent one is answered.
    pub duration_s: f64,
    /// Users start within this many seconds of the beginning.
    pub stagger_s: f64,
}

impl Agentic {
    pub const NAME: &'static str = "agentic";

    /// Reads every `trace_*.json` of `dir`, in name order.
    pub fn load(dir: &Path, counts: Vec<f64>, duration_s: f64, stagger_s: f64) -> Result<Self, AgenticError> {
        let read_error = |error| AgenticError::Read { path: dir.to_path_buf(), error };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(read_error)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("trace_") && n.ends_with(".json"))
            })
            .collect();
        files.sort();
        let mut sessions = Vec::new();
        let mut skipped = Vec::new();
        let mut notes = LoadNotes::default();
        for path in files {
            let session = read_session(&path, &mut notes)?;
            match fits(&session) {
                Ok(()) => sessions.push(session),
                Err(why) => skipped.push((session.name, why)),
            }
        }
        if sessions.is_empty() {
            return Err(AgenticError::Empty { dir: dir.to_path_buf() });
        }
        Ok(Self { dir: dir.to_path_buf(), sessions, skipped, notes, counts, duration_s, stagger_s })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn sessions(&self) -> &[Session] {
        &self.sessions
    }

    /// What loading left out and changed, in a sentence.
    pub fn describe(&self) -> String {
        let calls: usize = self.sessions.iter().map(|s| s.calls.len()).sum();
        let mut out = format!(
            "{} sessions ({calls} calls) from {}; think times over {MAX_THINK_S} s cut to it: {} of them",
            self.sessions.len(),
            self.dir.display(),
            self.notes.compressed_gaps
        );
        for (name, why) in &self.skipped {
            out.push_str(&format!("; left out {name}: {why}"));
        }
        out
    }
}

fn read_session(path: &Path, notes: &mut LoadNotes) -> Result<Session, AgenticError> {
    let bytes = std::fs::read(path).map_err(|error| AgenticError::Read { path: path.to_path_buf(), error })?;
    let file: TraceFile =
        serde_json::from_slice(&bytes).map_err(|error| AgenticError::Parse { path: path.to_path_buf(), error })?;
    let invalid = |reason: String| AgenticError::Invalid { path: path.to_path_buf(), reason };
    if file.block_size as usize * CHARS_PER_TOKEN != BLOCK_BYTES {
        return Err(invalid(format!("block_size {} is not the 64 tokens this workload reads", file.block_size)));
    }
    let mut calls = Vec::new();
    for (i, entry) in file.requests.iter().enumerate() {
        if entry.kind == "subagent" {
            let tools = entry.tool_tokens.unwrap_or(0);
            for (j, sub) in entry.requests.iter().flatten().enumerate() {
                calls.push(
                    call(sub, tools, notes)
                        .map_err(|why| invalid(format!("request {i}, sub-agent call {j}: {why}")))?,
                );
            }
        } else {
            calls.push(call(entry, file.tool_tokens, notes).map_err(|why| invalid(format!("request {i}: {why}")))?);
        }
    }
    if calls.is_empty() {
        return Err(invalid("no calls".into()));
    }
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
    Ok(Session { name, calls })
}

fn call(entry: &Entry, tool_tokens: u32, notes: &mut LoadNotes) -> Result<Call, String> {
    let input_tokens = entry.input.filter(|&n| n > 0).ok_or("no `in` tokens")?;
    let hash_ids = entry.hash_ids.clone().ok_or("no `hash_ids`")?;
    if hash_ids.len() as u64 > u64::from(input_tokens) / (BLOCK_BYTES / CHARS_PER_TOKEN) as u64 {
        return Err(format!("{} block ids for {input_tokens} tokens", hash_ids.len()));
    }
    let think_s = match entry.think_time {
        Some(t) if t.is_finite() && t >= 0.0 => {
            if t > MAX_THINK_S {
                notes.compressed_gaps += 1;
            }
            t.min(MAX_THINK_S)
        }
        Some(t) => return Err(format!("think_time {t} is not a delay")),
        None => {
            notes.missing_think += 1;
            0.0
        }
    };
    Ok(Call { input_tokens, output_tokens: entry.out.unwrap_or(1).max(1), hash_ids, think_s, tool_tokens })
}

/// Whether every call of the session fits an empty pod's KV cache.
fn fits(session: &Session) -> Result<(), String> {
    let block = u64::from(PROFILE.block_size);
    let worst = session
        .calls
        .iter()
        .map(|c| u64::from(c.input_tokens).div_ceil(block) + u64::from(c.output_tokens).div_ceil(block));
    match worst.max() {
        Some(blocks) if blocks > PROFILE.num_gpu_blocks => Err(format!(
            "a call needs {blocks} KV blocks of {} tokens, a pod holds {}",
            PROFILE.block_size, PROFILE.num_gpu_blocks
        )),
        _ => Ok(()),
    }
}

/// Prompt bytes per trace block: 64 tokens of 4 bytes.
const BLOCK_BYTES: usize = 64 * CHARS_PER_TOKEN;

/// The text key of block `position` (id `id`) of a prompt of session `instance`.
fn block_key(call: &Call, position: usize, id: u64, instance: u64) -> u64 {
    let shared = call.tool_tokens as usize * CHARS_PER_TOKEN / BLOCK_BYTES;
    if position < shared {
        xxh64(&(position as u64).to_le_bytes(), TOOLS_SALT ^ u64::from(call.tool_tokens))
    } else {
        xxh64(&id.to_le_bytes(), SESSION_SALT ^ instance)
    }
}

impl Workload for Agentic {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn steps(&self) -> Vec<LoadStep> {
        self.counts.iter().map(|&qps| LoadStep { qps }).collect()
    }

    /// N users, each playing sessions back to back. The session order is the seed's, the
    /// same at every step; the users' start times depend on the seed and N.
    fn scenario(&self, step: LoadStep, seed: u64) -> Scenario {
        let users = step.qps.max(1.0).round() as usize;
        let mut order: Vec<usize> = (0..self.sessions.len()).collect();
        fastrand::Rng::with_seed(seed).shuffle(&mut order);
        let mut rng = fastrand::Rng::with_seed(seed ^ (users as u64).rotate_left(32));
        let header = render(&[("user", "")]);
        let mut library = BlockLibrary::new(BLOCK_BYTES);
        // Per request: its call, its session instance, its arrival.
        let mut planned: Vec<(&Call, u64, Arrival)> = Vec::new();
        for user in 0..users {
            let start_s = rng.f64() * self.stagger_s;
            // Users start at evenly spread places in the shuffled list.
            let first = user * order.len() / users;
            let mut elapsed = 0.0;
            let mut previous: Option<usize> = None;
            let mut played = 0;
            'sessions: for round in 0u64.. {
                let next = first + round as usize;
                let Some(&index) = order.get(next % order.len()) else { break };
                let instance = xxh64(&[user as u64, round, index as u64].map(u64::to_le_bytes).concat(), seed);
                for call in &self.sessions[index].calls {
                    let arrival = match previous {
                        None => Arrival::At(start_s),
                        Some(previous) => Arrival::After { previous, think_s: call.think_s },
                    };
                    previous = Some(planned.len());
                    planned.push((call, instance, arrival));
                    // A lower bound of the call's end: its think time and its decode.
                    elapsed += call.think_s + f64::from(call.output_tokens) * PROFILE.itl_base_ms / 1000.0;
                    played += 1;
                    if start_s + elapsed > self.duration_s || played >= MAX_CALLS_PER_USER {
                        break 'sessions;
                    }
                }
            }
        }
        for (call, instance, _) in &planned {
            for (position, &id) in call.hash_ids.iter().enumerate() {
                library.add(block_key(call, position, id, *instance));
            }
        }
        let library = Arc::new(library);
        let requests = planned
            .into_iter()
            .enumerate()
            .map(|(n, (call, instance, arrival))| BenchRequest {
                arrival,
                model: BASE_MODEL.into(),
                adapter: None,
                prompt: Prompt::Blocks(BlockPrompt {
                    library: Arc::clone(&library),
                    header: header.clone(),
                    keys: call.hash_ids.iter().enumerate().map(|(p, &id)| block_key(call, p, id, instance)).collect(),
                    len: call.input_tokens as usize * CHARS_PER_TOKEN,
                    filler_seed: xxh64(&(n as u64).to_le_bytes(), instance),
                }),
                output_tokens: call.output_tokens,
                session: Some(instance),
            })
            .collect();
        Scenario {
            pods: PODS,
            profile: PROFILE,
            adapters: Vec::new(),
            requests,
            duration_s: self.duration_s,
            calibration: CalibrationPlan::NONE,
        }
    }
}

#[cfg(test)]
mod tests;
