use infergate_model_sim::engine::block_hashes;

use super::*;

/// A directory of its own under the temp dir with these files.
fn dir_with(name: &str, files: &[(&str, String)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("infergate-agentic-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (file, text) in files {
        std::fs::write(dir.join(file), text).unwrap();
    }
    dir
}

/// A session of `calls` calls: each re-sends the one before plus 3 new blocks; the
/// first 2 blocks are the tool definitions (128 tokens of them).
fn session(calls: usize, think: f64) -> String {
    let requests: Vec<String> = (0..calls)
        .map(|i| {
            let blocks = 10 + 3 * i;
            let ids: Vec<String> = (1..=blocks).map(|b| b.to_string()).collect();
            format!(
                r#"{{"t":{i},"type":"n","in":{},"out":20,"hash_ids":[{}],"think_time":{think}}}"#,
                blocks * 64 + 30,
                ids.join(",")
            )
        })
        .collect();
    format!(r#"{{"id":"x","block_size":64,"tool_tokens":128,"system_tokens":64,"requests":[{}]}}"#, requests.join(","))
}

fn load(dir: &Path) -> Agentic {
    Agentic::load(dir, vec![2.0], 600.0, 10.0).unwrap()
}

#[test]
fn sessions_load_with_sub_agents_in_place_and_long_gaps_cut() {
    let marker = r#"{"t":5,"type":"subagent","tool_tokens":64,"requests":[{"t":0,"type":"n","in":700,"out":5,"hash_ids":[900,901]},{"t":1,"type":"n","in":800,"out":5,"hash_ids":[900,901,902],"think_time":0.5}]}"#;
    let with_sub = session(2, 3000.0).replace(r#""requests":["#, &format!(r#""requests":[{marker},"#));
    let dir = dir_with(
        "load",
        &[("trace_0002.json", with_sub), ("trace_0001.json", session(3, 1.0)), ("notes.txt", "x".into())],
    );
    let agentic = load(&dir);
    let names: Vec<&str> = agentic.sessions().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["trace_0001", "trace_0002"], "trace files only, in name order");
    let calls = &agentic.sessions()[1].calls;
    assert_eq!(calls.len(), 4, "the sub-agent's two calls, then the session's two");
    assert_eq!((calls[0].hash_ids.clone(), calls[0].tool_tokens, calls[0].think_s), (vec![900, 901], 64, 0.0));
    assert_eq!((calls[2].think_s, calls[2].tool_tokens), (MAX_THINK_S, 128));
    assert_eq!(agentic.notes, LoadNotes { compressed_gaps: 2, missing_think: 1 });
    assert!(agentic.describe().contains("2 sessions (7 calls)"), "{}", agentic.describe());
}

#[test]
fn a_session_no_pod_can_hold_is_left_out_by_name_and_bad_files_are_named() {
    let huge = r#"{"block_size":64,"requests":[{"t":0,"type":"n","in":900000,"out":1,"hash_ids":[]}]}"#.to_string();
    let dir = dir_with("skip", &[("trace_0001.json", session(2, 1.0)), ("trace_0009.json", huge)]);
    let agentic = load(&dir);
    assert_eq!(agentic.sessions().len(), 1);
    assert_eq!(agentic.skipped[0].0, "trace_0009");
    assert!(agentic.describe().contains("left out trace_0009: a call needs 56251 KV blocks"), "{}", agentic.describe());
    let bad = dir_with("bad", &[("trace_0003.json", r#"{"block_size":64,"requests":[{"t":0,"type":"n""#.into())]);
    let error = Agentic::load(&bad, vec![1.0], 60.0, 1.0).err().unwrap().to_string();
    assert!(error.contains("trace_0003.json: EOF while parsing"), "{error}");
    let sized =
        dir_with("sized", &[("trace_0004.json", session(1, 1.0).replace(r#""block_size":64"#, r#""block_size":16"#))]);
    let error = Agentic::load(&sized, vec![1.0], 60.0, 1.0).err().unwrap().to_string();
    assert!(error.contains("trace_0004.json: block_size 16"), "{error}");
    let empty = dir_with("empty", &[]);
    assert!(matches!(Agentic::load(&empty, vec![1.0], 60.0, 1.0), Err(AgenticError::Empty { .. })));
}

#[test]
fn each_call_follows_the_answer_before_it_and_reuses_its_prefix() {
    let dir = dir_with("play", &[("trace_0001.json", session(3, 2.0)), ("trace_0002.json", session(4, 5.0))]);
    let agentic = load(&dir);
    let scenario = agentic.scenario(LoadStep { qps: 2.0 }, 7);
    assert_eq!(scenario.pods, 8);
    let requests = &scenario.requests;
    // Each user plays until its calls' think times and decodes pass the 600 s.
    assert!(requests.len() > 200, "{}", requests.len());
    assert!(matches!(requests[0].arrival, Arrival::At(t) if t < 10.0));
    assert!(matches!(requests[1].arrival, Arrival::After { previous: 0, .. }));
    let (a, b) = (requests[0].prompt.bytes(), requests[1].prompt.bytes());
    assert_eq!((a.len(), b.len()), ((10 * 64 + 30) * 4, (13 * 64 + 30) * 4), "in × 4 bytes");
    assert!(a.starts_with(b"<|user|>"));
    // The engine sees the recorded reuse: the 10 blocks of 64 tokens (40 of 16) the two
    // calls share, and nothing after.
    let (ea, eb) = (block_hashes(&a, None, 16), block_hashes(&b, None, 16));
    assert_eq!(ea[..40], eb[..40]);
    assert_ne!(ea[40], eb[40]);
    // Two users' sessions share only their tool definitions (2 blocks, 8 of 16 tokens).
    let second = requests.iter().position(|r| matches!(r.arrival, Arrival::At(_)) && r.prompt != requests[0].prompt);
    let other = block_hashes(&requests[second.unwrap()].prompt.bytes(), None, 16);
    assert_eq!(ea[..8], other[..8]);
    assert_ne!(ea[8], other[8]);
    assert_eq!(requests, &agentic.scenario(LoadStep { qps: 2.0 }, 7).requests, "the same seed, the same run");
}

/// The 72 recorded sessions of ../shared/traces/agentic: all load, and one is too long
/// for a pod.
#[test]
fn the_recorded_sessions_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces/agentic");
    let agentic = Agentic::load(&dir, vec![4.0], 300.0, 60.0).unwrap();
    assert_eq!(agentic.sessions().len() + agentic.skipped.len(), 72);
    assert_eq!(agentic.skipped.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>(), ["trace_0105"]);
    let calls: usize = agentic.sessions().iter().map(|s| s.calls.len()).sum();
    assert_eq!(calls, 3_039 - 16, "every leaf call but trace_0105's 16");
    let scenario = agentic.scenario(LoadStep { qps: 4.0 }, 42);
    let tokens: usize = scenario.requests.iter().map(|r| r.prompt.len() / 4).sum();
    assert!(tokens / scenario.requests.len() > 50_000, "long prompts: {}", tokens / scenario.requests.len());
}
