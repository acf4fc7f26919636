//! Real llama.cpp pods (`llama-server` on CPU), started with `engines/llamacpp/serve.sh`
//! from the binary and model that `make llamacpp` builds. The server is one process, but
//! each pod still runs in its own process group and the whole group is killed when the
//! pod is dropped, as for vLLM.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::artifacts::workspace_root;
use crate::engines::{EnginePod, PodCommand};

/// How long a pod may take to answer `/health` (about a second when idle; the model is
/// 98 MB).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The model file `engines/llamacpp/setup.sh` installs.
const MODEL_FILE: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where `setup.sh` builds: `LLAMACPP_DIR`, else `.cache/llamacpp` in the work tree.
fn llamacpp_dir() -> PathBuf {
    std::env::var_os("LLAMACPP_DIR").map_or_else(|| workspace_root().join(".cache/llamacpp"), PathBuf::from)
}

/// The `llama-server` binary and the model that `engines/llamacpp/setup.sh` builds, or
/// which of them is missing and how to get it.
pub fn llamacpp_installed() -> Result<(), String> {
    let dir = llamacpp_dir();
    let server = std::env::var_os("LLAMACPP_SERVER").map_or_else(|| dir.join("bin/llama-server"), PathBuf::from);
    let model = std::env::var_os("LLAMACPP_MODEL").map_or_else(|| dir.join(MODEL_FILE), PathBuf::from);
    let missing: Vec<String> =
        [&server, &model].iter().filter(|p| !p.is_file()).map(|p| p.display().to_string()).collect();
    if !missing.is_empty() {
        return Err(format!(
            "llama.cpp is not built ({} missing): run `make llamacpp` (engines/llamacpp/setup.sh; 6-11 min on \
             2 cores the first time)",
            missing.join(" and ")
        ));
    }
    Ok(())
}

/// A llama.cpp pod ([`EnginePod::llamacpp`]).
pub type LlamaCppPod = EnginePod;

impl EnginePod {
    /// A llama.cpp pod serving `smollm2` with `serve.sh`'s defaults (2 slots, 2,048
    /// tokens of context, one thread) plus `extra` llama-server arguments.
    pub fn llamacpp(log_dir: &Path, extra: &[&str]) -> Self {
        let command = PodCommand {
            engine: "llamacpp",
            script: "engines/llamacpp/serve.sh",
            args: extra,
            env: &[],
            start_timeout: START_TIMEOUT,
        };
        Self::spawn(&command, log_dir)
    }
}
