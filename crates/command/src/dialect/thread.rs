//! The agent's thread file: found in its private `HOME` and copied into
//! the scratch dir's [`AGENT_STATE_DIR`] beside `state.json` — after the
//! run ([`super::state::keep`]) and, while the agent still runs, before
//! each checkpoint ([`super::state::watch`]), so a replica that dies mid-turn leaves a
//! checkpoint another can resume the thread from.
//!
//! All file access goes through [`beneath`](super::beneath): the agent
//! owns both trees and may have swapped any directory for a link.

use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use korvus_workspace::AGENT_STATE_DIR;
use serde::{Deserialize, Serialize};

use super::beneath;
use super::{Decoder, Dialect, Usage};

/// The state file's name in [`AGENT_STATE_DIR`].
pub(crate) const STATE_FILE: &str = "state.json";

/// The thread file's name in [`AGENT_STATE_DIR`].
pub(crate) const THREAD_FILE: &str = "thread.jsonl";

/// What `state.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Kept {
    pub(crate) dialect: String,
    pub(crate) thread: String,
    /// Where the thread file was, relative to `HOME` (Codex's dated path).
    pub(crate) file: String,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
}

/// The largest thread file kept.
const MAX_THREAD_BYTES: u64 = 64 * 1024 * 1024;

/// Thread ids are what the agents mint: letters, digits, `-` and `_`.
pub(crate) fn is_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Claude Code's session file for a run in `cwd` (see [`claude_folder`]).
pub(crate) fn claude_file(home: &Path, cwd: &Path, session: &str) -> PathBuf {
    home.join(".claude/projects")
        .join(claude_folder(&cwd.to_string_lossy()))
        .join(format!("{session}.jsonl"))
}

/// The longest projects folder name Claude Code keeps whole.
const CLAUDE_FOLDER_MAX: usize = 200;

/// The projects folder Claude Code names after a working directory, as it
/// does (2.1.x): every UTF-16 code unit but ASCII letters and digits
/// turned into `-`; a name over 200 units cut there and followed by `-`
/// and the base-36 absolute value of a 32-bit string hash of the whole
/// path (`h = h * 31 + unit`, wrapping), so a long data dir still finds
/// the thread it resumes.
pub(crate) fn claude_folder(cwd: &str) -> String {
    let units: Vec<u16> = cwd.encode_utf16().collect();
    let folder: String = units
        .iter()
        .map(|&u| match u8::try_from(u) {
            Ok(b) if b.is_ascii_alphanumeric() => char::from(b),
            _ => '-',
        })
        .collect();
    if folder.len() <= CLAUDE_FOLDER_MAX {
        return folder;
    }
    let hash = units.iter().fold(0_i32, |h, &u| {
        (h << 5).wrapping_sub(h).wrapping_add(i32::from(u))
    });
    format!(
        "{}-{}",
        &folder[..CLAUDE_FOLDER_MAX],
        base36(u64::from(hash.unsigned_abs()))
    )
}

/// `n` in base 36, lower case, as JavaScript's `toString(36)`.
fn base36(mut n: u64) -> String {
    let mut digits = Vec::new();
    loop {
        digits.push(b"0123456789abcdefghijklmnopqrstuvwxyz"[usize::try_from(n % 36).unwrap_or(0)]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    digits.reverse();
    String::from_utf8(digits).unwrap_or_default()
}

/// Codex's rollout of `thread` beneath `$HOME/.codex/sessions` (a dated
/// path), relative to `HOME`, found through descriptors without
/// descending into a symbolic link.
fn find_codex(home: &OwnedFd, thread: &str) -> Option<PathBuf> {
    let suffix = format!("-{thread}.jsonl");
    beneath::find(home, Path::new(".codex/sessions"), &suffix, 10_000)
}

/// Where `dialect`'s file of `thread` is, relative to `home`, when the
/// agent left a file there (a link of any kind is not followed: none is
/// found, or its open fails).
pub(crate) fn locate(
    scratch: &Path,
    home: &Path,
    dialect: Dialect,
    thread: &str,
) -> Option<PathBuf> {
    let home_fd = open_home(scratch, home).ok()?;
    match dialect {
        Dialect::Codex => find_codex(&home_fd, thread),
        Dialect::ClaudeCode => {
            let file = claude_file(home, scratch, thread);
            let rel = file.strip_prefix(home).ok()?.to_path_buf();
            beneath::open_regular(&home_fd, &rel).is_ok().then_some(rel)
        }
        Dialect::Korvus => None,
    }
}

/// `home`'s directory (beneath `scratch`), opened.
fn open_home(scratch: &Path, home: &Path) -> Result<OwnedFd, String> {
    let rel = home
        .strip_prefix(scratch)
        .map_err(|_| format!("{} is not in the scratch dir", home.display()))?;
    let root = beneath::root(scratch).map_err(|e| format!("cannot open the scratch dir: {e}"))?;
    beneath::dir(&root, rel, false).map_err(|e| format!("cannot open the agent's HOME: {e}"))
}

/// What identifies a thread file's version: size, modification time and
/// inode.
type Stamp = (u64, i64, i64, u64);

/// The thread file `rel` under `home`, read whole (at most 64 MiB) with
/// its stamp; the read is skipped (`None`) when its stamp is `unchanged`.
fn read(
    scratch: &Path,
    home: &Path,
    rel: &Path,
    unchanged: Option<Stamp>,
) -> Result<Option<(Vec<u8>, Stamp)>, String> {
    let home_fd = open_home(scratch, home)?;
    let file = beneath::open_regular(&home_fd, rel)
        .map_err(|e| format!("cannot open the agent's thread file {}: {e}", rel.display()))?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    let stamp = (meta.len(), meta.mtime(), meta.mtime_nsec(), meta.ino());
    if unchanged == Some(stamp) {
        return Ok(None);
    }
    let bytes = beneath::read_at_most(file, MAX_THREAD_BYTES)
        .map_err(|e| format!("the agent's thread file {}: {e}", rel.display()))?;
    Ok(Some((bytes, stamp)))
}

/// The thread file's bytes for `unreported` usage: the whole file.
pub(crate) fn read_whole(scratch: &Path, home: &Path, rel: &Path) -> Result<Vec<u8>, String> {
    Ok(read(scratch, home, rel, None)?
        .map(|(b, _)| b)
        .unwrap_or_default())
}

/// What a copy last wrote: the thread file's stamp and the total.
pub(crate) type Copied = Option<(Stamp, Usage)>;

/// Copies `thread`'s file (its torn last line dropped: the agent may be
/// writing it) into [`AGENT_STATE_DIR`] as [`THREAD_FILE`] and writes
/// [`STATE_FILE`] beside it, unless neither changed since `last`, which
/// it then updates. `Ok(false)` when the agent left no file for it.
pub(crate) fn copy(
    scratch: &Path,
    home: &Path,
    dialect: Dialect,
    thread: &str,
    total: Usage,
    last: &mut Copied,
) -> Result<bool, String> {
    let Some(rel) = locate(scratch, home, dialect, thread) else {
        return Ok(false);
    };
    let unchanged = last.filter(|(_, t)| *t == total).map(|(s, _)| s);
    let Some((mut bytes, stamp)) = read(scratch, home, &rel, unchanged)? else {
        return Ok(true);
    };
    let whole = bytes
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |at| at + 1);
    bytes.truncate(whole);
    let root = beneath::root(scratch).map_err(|e| format!("cannot open the scratch dir: {e}"))?;
    let dir = beneath::dir(&root, Path::new(AGENT_STATE_DIR), true)
        .map_err(|e| format!("cannot make {AGENT_STATE_DIR}: {e}"))?;
    beneath::write(&dir, THREAD_FILE, &bytes)
        .map_err(|e| format!("cannot keep the agent's thread file: {e}"))?;
    let kept = Kept {
        dialect: dialect.name().to_owned(),
        thread: thread.to_owned(),
        file: rel.to_string_lossy().into_owned(),
        input_tokens: total.input,
        output_tokens: total.output,
    };
    let json = serde_json::to_vec_pretty(&kept).map_err(|e| e.to_string())?;
    beneath::write(&dir, STATE_FILE, &json)
        .map_err(|e| format!("cannot keep the agent state: {e}"))?;
    *last = Some((stamp, total));
    Ok(true)
}

/// The thread the run's decoder has named so far and the running total it
/// was told, shared between the run's output (which updates it) and its
/// checkpoint hook (which copies it).
#[derive(Debug, Clone, Default)]
pub(crate) struct Published(Arc<Mutex<Option<(String, Usage)>>>);

impl Published {
    /// Takes what `decoder` has learnt.
    pub(crate) fn update(&self, decoder: &Decoder) {
        let Some(thread) = decoder.thread().filter(|t| is_id(t)) else {
            return;
        };
        let total = decoder.total();
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(&*held, Some((t, u)) if t == thread && *u == total) {
            *held = Some((thread.to_owned(), total));
        }
    }

    /// The thread named so far and the total it was told.
    pub(crate) fn get(&self) -> Option<(String, Usage)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codex_rollout(scratch: &Path, thread: &str, text: &str) -> PathBuf {
        let home = scratch.join(".korvus/home");
        let file = home.join(format!(
            ".codex/sessions/2026/12/05/rollout-2026-12-05T09-00-00-{thread}.jsonl"
        ));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, text).unwrap();
        home
    }

    #[test]
    fn a_live_copy_drops_a_torn_line_and_skips_an_unchanged_file() {
        let dir = tempfile::tempdir().unwrap();
        let home = codex_rollout(dir.path(), "th-5", "{\"a\":1}\n{\"b\":");
        let total = Usage {
            input: 7,
            output: 3,
        };
        let mut last = None;
        assert!(copy(dir.path(), &home, Dialect::Codex, "th-5", total, &mut last).unwrap());
        let kept = dir.path().join(AGENT_STATE_DIR);
        assert_eq!(
            std::fs::read_to_string(kept.join(THREAD_FILE)).unwrap(),
            "{\"a\":1}\n"
        );
        let state: Kept =
            serde_json::from_slice(&std::fs::read(kept.join(STATE_FILE)).unwrap()).unwrap();
        assert_eq!((state.thread.as_str(), state.input_tokens), ("th-5", 7));
        // Unchanged: not copied again (a marker written over the copy
        // stays); a new total is written.
        std::fs::write(kept.join(THREAD_FILE), "marker").unwrap();
        assert!(copy(dir.path(), &home, Dialect::Codex, "th-5", total, &mut last).unwrap());
        assert_eq!(
            std::fs::read_to_string(kept.join(THREAD_FILE)).unwrap(),
            "marker"
        );
        let more = Usage {
            input: 9,
            output: 4,
        };
        assert!(copy(dir.path(), &home, Dialect::Codex, "th-5", more, &mut last).unwrap());
        assert_eq!(
            std::fs::read_to_string(kept.join(THREAD_FILE)).unwrap(),
            "{\"a\":1}\n"
        );
    }

    #[test]
    fn a_swapped_home_or_state_dir_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        // The "operator's" rollout of the same thread id, outside.
        let theirs = codex_rollout(outside.path(), "th-6", "{\"secret\":1}\n");
        let home = dir.path().join(".korvus/home");
        std::fs::create_dir_all(&home).unwrap();
        std::os::unix::fs::symlink(theirs.join(".codex"), home.join(".codex")).unwrap();
        let total = Usage::default();
        let copied = copy(dir.path(), &home, Dialect::Codex, "th-6", total, &mut None);
        assert!(!matches!(copied, Ok(true)), "{copied:?}");
        assert!(!dir.path().join(AGENT_STATE_DIR).join(THREAD_FILE).exists());
        // A hard link to the operator's rollout, in the agent's own tree.
        std::fs::remove_file(home.join(".codex")).unwrap();
        let mine = home.join(".codex/sessions/2026/12/05");
        std::fs::create_dir_all(&mine).unwrap();
        let theirs_file =
            theirs.join(".codex/sessions/2026/12/05/rollout-2026-12-05T09-00-00-th-6.jsonl");
        std::fs::hard_link(&theirs_file, mine.join("rollout-x-th-6.jsonl")).unwrap();
        let copied = copy(dir.path(), &home, Dialect::Codex, "th-6", total, &mut None);
        assert!(copied.is_err(), "{copied:?}");
        assert!(!dir.path().join(AGENT_STATE_DIR).join(THREAD_FILE).exists());

        // The state dir swapped for a link to a directory outside.
        let dir = tempfile::tempdir().unwrap();
        let home = codex_rollout(dir.path(), "th-7", "{}\n");
        std::os::unix::fs::symlink(outside.path(), dir.path().join(AGENT_STATE_DIR)).unwrap();
        let err = copy(dir.path(), &home, Dialect::Codex, "th-7", total, &mut None);
        assert!(err.is_err(), "{err:?}");
        assert!(!outside.path().join(THREAD_FILE).exists());
    }
}
