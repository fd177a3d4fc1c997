//! The real agents of the end-to-end agent tests: Codex and Claude Code,
//! installed from the npm registry at pinned versions into
//! `target/agents` (once per version).
//!
//! [`ensure`] exports `KORVUS_CODEX_BIN` and `KORVUS_CLAUDE_BIN` (the
//! native binaries the packages ship). Where they cannot be installed (no
//! npm, no registry) it says so loudly and exports
//! `KORVUS_AGENTS_UNAVAILABLE` with the reason: the agent tests fail on it
//! under `cargo xtask test` (they are required there) and print a skip
//! elsewhere. Nothing runs, so there is nothing to stop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::services::Service;

/// The packages, at the versions the tests were written against.
pub(crate) const PACKAGES: &[&str] =
    &["@openai/codex@0.171.0", "@anthropic-ai/claude-code@2.1.332"];

/// The agents, or why there are none.
pub(crate) struct Agents {
    env: Vec<(String, String)>,
}

impl Service for Agents {
    fn env(&self) -> Vec<(String, String)> {
        self.env.clone()
    }

    fn stop(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Installs the agents when missing; never fails.
pub(crate) fn ensure(target: &Path) -> Agents {
    let dir = target.join("agents");
    let env = match install(&dir).and_then(|()| binaries(&dir)) {
        Ok((codex, claude)) => vec![
            ("KORVUS_CODEX_BIN".to_owned(), codex.display().to_string()),
            ("KORVUS_CLAUDE_BIN".to_owned(), claude.display().to_string()),
        ],
        Err(why) => {
            eprintln!(
                "\nxtask: ************************************************************\n\
                 xtask: the real-agent tests cannot run: {why}\n\
                 xtask: ************************************************************\n"
            );
            vec![("KORVUS_AGENTS_UNAVAILABLE".to_owned(), why)]
        }
    };
    Agents { env }
}

/// `npm install` of [`PACKAGES`] into `dir`, skipped when the versions
/// there are already these.
fn install(dir: &Path) -> Result<(), String> {
    let marker = dir.join("installed");
    let wanted = PACKAGES.join("\n");
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == wanted) {
        return Ok(());
    }
    eprintln!(
        "xtask: installing {} from the npm registry (once)",
        PACKAGES.join(", ")
    );
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // The packages' install scripts only pick the platform's binary, which
    // npm already placed as an optional dependency: none is run.
    let status = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--ignore-scripts",
            "--prefix",
        ])
        .arg(dir)
        .args(PACKAGES)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run npm: {e}"))?;
    if !status.success() {
        return Err(format!(
            "npm install {} failed ({status})",
            PACKAGES.join(" ")
        ));
    }
    std::fs::write(&marker, wanted).map_err(|e| format!("cannot write {}: {e}", marker.display()))
}

/// The native Codex and Claude Code binaries of the platform packages.
fn binaries(dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    let modules = dir.join("node_modules");
    let codex = find(
        &modules.join("@openai"),
        "codex-linux-",
        &["vendor", "*", "bin", "codex"],
    );
    let claude = find(
        &modules.join("@anthropic-ai"),
        "claude-code-linux-",
        &["claude"],
    );
    match (codex, claude) {
        (Some(codex), Some(claude)) => Ok((codex, claude)),
        _ => Err(format!(
            "no native codex or claude binary for this platform under {}",
            modules.display()
        )),
    }
}

/// The first file at `rest` (where `*` is any one entry) beneath an entry
/// of `scope` whose name starts with `prefix`.
fn find(scope: &Path, prefix: &str, rest: &[&str]) -> Option<PathBuf> {
    let entries = std::fs::read_dir(scope).ok()?;
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    for mut found in dirs.into_iter().map(|d| vec![d]) {
        for part in rest {
            found = found
                .into_iter()
                .flat_map(|d| {
                    if *part == "*" {
                        std::fs::read_dir(&d)
                            .into_iter()
                            .flatten()
                            .flatten()
                            .map(|e| e.path())
                            .collect::<Vec<_>>()
                    } else {
                        vec![d.join(part)]
                    }
                })
                .collect();
        }
        if let Some(file) = found.into_iter().find(|f| f.is_file()) {
            return Some(file);
        }
    }
    None
}
