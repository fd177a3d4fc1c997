//! The RustSec advisory database `cargo deny check advisories` reads, from
//! a local snapshot: these machines reach no git host, so cargo-deny can
//! neither clone nor fetch it.
//!
//! cargo-deny wants the database as a git checkout named after its URL
//! under `db-path` (`deny.toml`: `target/advisory-db`, relative to the
//! workspace root, where lint runs it) and reads its HEAD's date. [`prepare`]
//! copies the snapshot there and commits it, dated by its newest advisory.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The variable naming the snapshot: a copy of the advisory-db
/// repository's files (no `.git` needed).
pub(crate) const VAR: &str = "KORVUS_ADVISORY_DB";

/// cargo-deny's directory name for the default database URL.
const CHECKOUT: &str = "advisory-db-3157b0e258782691";

/// Where the snapshot is: `$KORVUS_ADVISORY_DB`, else a `shared/advisory-db`
/// beside the workspace (where CI keeps it), else nowhere.
fn snapshot(root: &Path) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(VAR) {
        return Some(PathBuf::from(dir));
    }
    let beside = root.join("../shared/advisory-db");
    beside.join("crates").is_dir().then_some(beside)
}

/// The newest `date = "YYYY-MM-DD"` of the snapshot's advisories: the day
/// it was taken, near enough.
fn newest_date(db: &Path) -> Result<String> {
    let mut newest = String::new();
    for krate in std::fs::read_dir(db.join("crates"))?.flatten() {
        for advisory in std::fs::read_dir(krate.path())?.flatten() {
            let Ok(text) = std::fs::read_to_string(advisory.path()) else {
                continue;
            };
            for line in text.lines() {
                if let Some(date) = line.strip_prefix("date = \"") {
                    let date = date.trim_end_matches('"');
                    if date.len() == 10 && date > newest.as_str() {
                        newest = date.to_owned();
                    }
                }
            }
        }
    }
    if newest.is_empty() {
        bail!("{} holds no advisory with a date", db.display());
    }
    Ok(newest)
}

/// Puts the snapshot where cargo-deny looks; `false` (said on stderr,
/// naming [`VAR`]) when there is none.
pub(crate) fn prepare(root: &Path) -> Result<bool> {
    let Some(db) = snapshot(root) else {
        eprintln!(
            "\nxtask: ************************************************************\n\
             xtask: advisories NOT checked: no RustSec database snapshot here.\n\
             xtask: Set {VAR} to a copy of github.com/rustsec/advisory-db.\n\
             xtask: ************************************************************\n"
        );
        return Ok(false);
    };
    if !db.join("crates").is_dir() {
        bail!(
            "{VAR}={}: not a copy of the advisory database (no crates/)",
            db.display()
        );
    }
    let date = newest_date(&db)?;
    let dst = root.join("target/advisory-db").join(CHECKOUT);
    if dst.exists() {
        std::fs::remove_dir_all(&dst).with_context(|| format!("removing {}", dst.display()))?;
    }
    std::fs::create_dir_all(&dst)?;
    let copied = Command::new("cp")
        .arg("-r")
        .arg(db.join("."))
        .arg(&dst)
        .status()?;
    if !copied.success() {
        bail!("copying {} failed", db.display());
    }
    let _ = std::fs::remove_dir_all(dst.join(".git"));
    let git = |args: &[&str]| {
        Command::new("git")
            .args([
                "-c",
                "user.name=snapshot",
                "-c",
                "user.email=snapshot@localhost",
            ])
            .args(args)
            .current_dir(&dst)
            .env("GIT_AUTHOR_DATE", format!("{date}T00:00:00Z"))
            .env("GIT_COMMITTER_DATE", format!("{date}T00:00:00Z"))
            .status()
    };
    for step in [
        &["init", "-q"][..],
        &["add", "-A"],
        &["commit", "-qm", "snapshot"],
    ] {
        if !git(step)?.success() {
            bail!("git {} in {} failed", step.join(" "), dst.display());
        }
    }
    eprintln!(
        "xtask: advisories checked against the snapshot of {date} ({})",
        db.display()
    );
    Ok(true)
}
