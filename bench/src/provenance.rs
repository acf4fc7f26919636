//! Where a results file came from: the commit it was made at (and whether the work
//! tree differed from it), the date, the command and the machine's cores. Every
//! results file written through this names all four, so that a figure can be traced to
//! the code that made it.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// `git rev-parse HEAD`, or "unknown" outside a work tree.
    pub commit: String,
    /// Uncommitted changes to tracked files when the run started.
    pub dirty: bool,
    /// UTC, RFC 3339, when the run started.
    pub date: String,
    /// The command line, as run.
    pub command: String,
    /// Cores this process could run on.
    pub cores: usize,
}

impl Provenance {
    /// This process's, now.
    pub fn here() -> Self {
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
        let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        let date = std::process::Command::new("date")
            .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        Self { commit, dirty, date, command, cores }
    }

    /// One line for a report: "at abc1234 (with uncommitted changes), 2026-12-08, 2 cores".
    pub fn line(&self) -> String {
        let short = self.commit.get(..7).unwrap_or(&self.commit);
        let dirty = if self.dirty { " (with uncommitted changes)" } else { "" };
        let day = self.date.get(..10).unwrap_or(&self.date);
        format!("at {short}{dirty}, {day}, {} cores: `{}`", self.cores, self.command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_the_short_commit_the_day_and_the_command() {
        let p = Provenance {
            commit: "0123456789abcdef".into(),
            dirty: true,
            date: "2026-12-08T01:02:03Z".into(),
            command: "peers --out x".into(),
            cores: 2,
        };
        assert_eq!(p.line(), "at 0123456 (with uncommitted changes), 2026-12-08, 2 cores: `peers --out x`");
    }

    #[test]
    fn here_knows_the_cores_and_the_command() {
        let p = Provenance::here();
        assert!(p.cores >= 1);
        assert!(!p.command.is_empty());
        assert_eq!(p.date.len(), "2026-12-08T01:02:03Z".len(), "{}", p.date);
    }
}
