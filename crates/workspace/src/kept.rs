//! Kept iteration dirs: the mark that keeps a run's scratch dir from
//! every removal until its output is stored ([`keep`], [`kept_reason`],
//! [`unkeep`]), and the list of a session's kept dirs ([`kept_dirs`]) a
//! salvage works through.
//!
//! The mark is a file `<root>/<session>/<revision>.kept` beside the dir —
//! outside what the agent may write, like the agent records — holding the
//! reason.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use korvus_store::SessionId;

/// The extension of the mark of a kept iteration dir.
pub(crate) const KEPT_EXTENSION: &str = "kept";

/// The mark of the iteration dir `scratch` (`<root>/<session>/<revision>`):
/// `<root>/<session>/<revision>.kept`.
fn kept_mark(scratch: &Path) -> Option<PathBuf> {
    let mut file = scratch.file_name()?.to_os_string();
    file.push(".");
    file.push(KEPT_EXTENSION);
    Some(scratch.parent()?.join(file))
}

/// Marks the iteration dir `scratch` kept: its output is not stored, so no
/// removal here takes it until [`unkeep`]. `reason` (one line) says why,
/// for the operator. A mark already there gets the new reason and keeps
/// its time: the dir is kept since it was first marked.
///
/// # Errors
/// The I/O error of writing the mark (durably: written, then synced).
pub fn keep(scratch: &Path, reason: &str) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mark = kept_mark(scratch).ok_or_else(|| io::Error::other("no session dir"))?;
    // A dir a salvage already stored and removed (a fenced-off run that
    // comes back late) gets no mark: there is nothing left to keep.
    if !fs::symlink_metadata(scratch)?.is_dir() {
        return Err(io::Error::other("not a directory"));
    }
    let first = fs::symlink_metadata(&mark)
        .ok()
        .filter(fs::Metadata::is_file)
        .and_then(|m| m.modified().ok());
    // Never through a symlink planted where the mark goes.
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&mark)?;
    let mut line = reason.replace('\n', " ");
    line.truncate(floor_char_boundary(&line, MAX_REASON_BYTES));
    file.write_all(line.as_bytes())?;
    file.write_all(b"\n")?;
    // The mark says since when the dir is kept (its retention's age): a
    // new reason does not make it younger.
    if let Some(first) = first {
        file.set_modified(first)?;
    }
    file.sync_all()?;
    // The mark's name durable too: it is what keeps the dir.
    match mark.parent() {
        Some(dir) => fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// The reason of the mark [`mark_running`] writes.
pub const RUNNING_REASON: &str =
    "its run started and had not stored its output when its process ended";

/// Marks the iteration dir `scratch` kept while its run goes: from the
/// moment the agent starts, the dir holds what the agent makes, and a
/// process that dies before its landing (SIGKILL, out of memory) leaves it
/// for a salvage, never for a removal. The run's clean-up clears the mark
/// once its output is stored ([`unkeep`]), or replaces its reason
/// ([`keep`]). Not synced: it guards against the process dying, which
/// loses no written page; [`keep`] is the durable mark.
///
/// # Errors
/// The I/O error of writing the mark.
pub fn mark_running(scratch: &Path) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mark = kept_mark(scratch).ok_or_else(|| io::Error::other("no session dir"))?;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&mark)?;
    let pid = std::process::id();
    let started = crate::agents::start_time(pid as i32).unwrap_or(0);
    writeln!(
        file,
        "{RUNNING_REASON} (korvus process {pid} started at tick {started})"
    )
}

/// Whether the mark's text is a running mark whose process is still the
/// one that wrote it: its run may still be using the dir.
fn run_alive(reason: &str) -> bool {
    let Some(rest) = reason
        .strip_prefix(RUNNING_REASON)
        .and_then(|r| r.strip_prefix(" (korvus process "))
        .and_then(|r| r.strip_suffix(')'))
    else {
        return false;
    };
    let Some((pid, started)) = rest.split_once(" started at tick ") else {
        return false;
    };
    match (pid.parse::<i32>(), started.parse::<u64>()) {
        (Ok(pid), Ok(started)) => crate::agents::start_time(pid) == Some(started),
        _ => false,
    }
}

/// The longest reason a mark keeps, in bytes.
const MAX_REASON_BYTES: usize = 4096;

/// The largest index at most `at` that is a char boundary of `s`.
fn floor_char_boundary(s: &str, at: usize) -> usize {
    let mut end = at.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    end
}

/// Why the iteration dir `scratch` is kept, if it is (a mark that cannot
/// be read still keeps it, with a reason saying so).
pub fn kept_reason(scratch: &Path) -> Option<String> {
    use std::io::Read as _;
    let mark = kept_mark(scratch)?;
    if let Err(e) = fs::symlink_metadata(&mark) {
        if e.kind() == io::ErrorKind::NotFound {
            return None;
        }
    }
    let mut text = String::new();
    let read = fs::File::open(&mark).and_then(|f| {
        f.take(MAX_REASON_BYTES as u64 + 1)
            .read_to_string(&mut text)
    });
    Some(match read {
        Ok(_) => text.trim_end().to_owned(),
        Err(e) => format!("(its kept mark could not be read: {e})"),
    })
}

/// Clears the mark of `scratch` (its output is stored now). A dir that
/// was not kept is fine.
///
/// # Errors
/// Any I/O error but `NotFound`.
pub fn unkeep(scratch: &Path) -> io::Result<()> {
    let Some(mark) = kept_mark(scratch) else {
        return Ok(());
    };
    match fs::remove_file(mark) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// One kept iteration dir of a session ([`kept_dirs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeptDir {
    /// The revision the dir's run worked on.
    pub revision: u32,
    /// The dir, `<root>/<session>/<revision>`.
    pub path: PathBuf,
    /// Why it is kept, as its mark says.
    pub reason: String,
    /// Whether its mark is a running mark ([`mark_running`]) whose korvus
    /// process is still alive: its run may still be using the dir, and a
    /// salvage leaves it alone.
    pub run_alive: bool,
}

/// The kept iteration dirs of `session` under the scratch root `root`,
/// oldest revision first: every real dir `<revision>` (a decimal number)
/// with a mark. A session without a dir has none.
///
/// # Errors
/// The I/O error of listing the session's dir, but `NotFound`.
pub fn kept_dirs(root: &Path, session: SessionId) -> io::Result<Vec<KeptDir>> {
    let dir = root.join(session.to_string());
    let list = match fs::read_dir(&dir) {
        Ok(list) => list,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut kept = Vec::new();
    for entry in list {
        let entry = entry?;
        let Some(revision) = entry
            .file_name()
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0'))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let path = entry.path();
        if let Some(reason) = kept_reason(&path) {
            kept.push(KeptDir {
                revision,
                path,
                run_alive: run_alive(&reason),
                reason,
            });
        }
    }
    kept.sort_by_key(|k| k.revision);
    Ok(kept)
}

/// Removes the kept iteration dir `scratch` and then its mark: output
/// that is given up (an operator's choice, or retention). Read-only trees
/// are made writable first and symlinks never followed; a dir that cannot
/// be removed whole keeps its mark.
///
/// # Errors
/// The I/O error of removing the dir or the mark.
pub fn discard(scratch: &Path) -> io::Result<()> {
    match crate::fsutil::remove_tree(scratch) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    unkeep(scratch)
}

/// How long and how much kept output a scratch root holds
/// ([`prune_kept`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeptRetention {
    /// A kept dir whose mark is older than this is removed.
    pub max_age: std::time::Duration,
    /// Beyond this many bytes of kept dirs in all, the oldest are removed
    /// until the rest fits.
    pub max_bytes: u64,
}

impl KeptRetention {
    /// Keep dirs at most `max_age` old and `max_bytes` in all.
    pub fn new(max_age: std::time::Duration, max_bytes: u64) -> Self {
        Self { max_age, max_bytes }
    }
}

impl Default for KeptRetention {
    /// 30 days and 10 GiB.
    fn default() -> Self {
        Self {
            max_age: std::time::Duration::from_secs(30 * 24 * 3600),
            max_bytes: 10 * 1024 * 1024 * 1024,
        }
    }
}

/// A kept dir [`prune_kept`] removed: output that was never stored is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrunedKept {
    /// The session whose output it was.
    pub session: SessionId,
    /// The dir, as it was.
    pub dir: KeptDir,
    /// How long it had been kept.
    pub age: std::time::Duration,
    /// Its size on disk, in bytes.
    pub bytes: u64,
    /// Which bound removed it: `"age"` or `"size"`.
    pub bound: &'static str,
}

/// Removes kept dirs under `root` past `retention`: every one kept longer
/// than `max_age` (since its mark was first written), then the oldest
/// while all of them together hold more than `max_bytes`. A dir whose
/// run's process is alive ([`KeptDir::run_alive`]) is in use: never
/// removed nor counted. Each one removed is returned — the caller logs it
/// and counts it: this is output that was never stored, and it is never
/// removed silently. Symlinks are never followed; a dir that cannot be
/// removed stays, kept.
///
/// # Errors
/// The I/O error of listing `root`.
pub fn prune_kept(root: &Path, retention: KeptRetention) -> io::Result<Vec<PrunedKept>> {
    let now = std::time::SystemTime::now();
    let mut all = Vec::new();
    for entry in fs::read_dir(root)? {
        let entry = entry?;
        let Some(session) = entry
            .file_name()
            .to_str()
            .and_then(|n| uuid::Uuid::try_parse(n).ok())
            .map(SessionId::from_uuid)
        else {
            continue;
        };
        if !entry.file_type()?.is_dir() {
            continue;
        }
        // A dir whose run's process is alive is in use, not kept output:
        // never removed here, and not counted.
        for dir in kept_dirs(root, session)?
            .into_iter()
            .filter(|d| !d.run_alive)
        {
            let since = kept_mark(&dir.path)
                .and_then(|m| fs::symlink_metadata(m).ok())
                .and_then(|m| m.modified().ok())
                .and_then(|t| now.duration_since(t).ok())
                .unwrap_or_default();
            let bytes = tree_bytes(&dir.path);
            all.push((session, dir, since, bytes));
        }
    }
    // Oldest first.
    all.sort_by_key(|a| std::cmp::Reverse(a.2));
    let mut total: u64 = all.iter().map(|a| a.3).sum();
    let mut pruned = Vec::new();
    for (session, dir, age, bytes) in all {
        let bound = if age > retention.max_age {
            "age"
        } else if total > retention.max_bytes {
            "size"
        } else {
            continue;
        };
        if discard(&dir.path).is_err() {
            continue;
        }
        total = total.saturating_sub(bytes);
        pruned.push(PrunedKept {
            session,
            dir,
            age,
            bytes,
            bound,
        });
    }
    Ok(pruned)
}

/// The bytes allocated to the files under `dir`, never following a
/// symlink; what cannot be read counts nothing.
fn tree_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(list) = fs::read_dir(&d) else { continue };
        for entry in list.flatten() {
            let Ok(meta) = fs::symlink_metadata(entry.path()) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total = total.saturating_add(meta.blocks().saturating_mul(512));
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_dirs_lists_marked_revision_dirs_oldest_first() {
        let root = tempfile::tempdir().unwrap();
        let session = SessionId::new();
        assert!(kept_dirs(root.path(), session).unwrap().is_empty());
        let dir = root.path().join(session.to_string());
        for name in ["1", "2", "3", "07", "notes"] {
            fs::create_dir_all(dir.join(name)).unwrap();
        }
        keep(&dir.join("3"), "rows not written").unwrap();
        keep(&dir.join("1"), "bucket gone").unwrap();
        // Marks of what is not a revision dir are not listed.
        keep(&dir.join("07"), "x").unwrap();
        keep(&dir.join("notes"), "x").unwrap();
        fs::write(dir.join("9"), "a file").unwrap();
        fs::write(dir.join("9.kept"), "x").unwrap();
        let kept = kept_dirs(root.path(), session).unwrap();
        let listed: Vec<_> = kept
            .iter()
            .map(|k| (k.revision, k.reason.as_str()))
            .collect();
        assert_eq!(listed, vec![(1, "bucket gone"), (3, "rows not written")]);
        assert_eq!(kept[0].path, dir.join("1"));
        assert!(!kept[0].run_alive);
        // A dir that is gone gets no mark.
        assert!(keep(&dir.join("4"), "late").is_err());
        assert!(!dir.join("4.kept").exists());
        // A running mark of this (live) process; one of a process that is
        // gone (a start tick that does not match) is not alive.
        mark_running(&dir.join("3")).unwrap();
        let kept = kept_dirs(root.path(), session).unwrap();
        assert!(kept[1].run_alive, "{:?}", kept[1]);
        assert!(kept[1].reason.starts_with(RUNNING_REASON));
        let dead = format!(
            "{RUNNING_REASON} (korvus process {} started at tick 1)",
            std::process::id()
        );
        assert!(!run_alive(&dead));
    }
}

#[cfg(test)]
mod retention_tests {
    use super::*;
    use std::time::Duration;

    /// Sets the mark of `dir` as written `ago`.
    fn kept_since(dir: &Path, ago: Duration) {
        let mark = kept_mark(dir).unwrap();
        let when = std::time::SystemTime::now() - ago;
        let file = fs::File::options().write(true).open(mark).unwrap();
        file.set_modified(when).unwrap();
    }

    #[test]
    fn prune_kept_removes_by_age_then_oldest_past_the_size_and_says_which() {
        let root = tempfile::tempdir().unwrap();
        let day = Duration::from_secs(24 * 3600);
        let mut made = Vec::new();
        for (age_days, kib) in [(40u64, 4usize), (10, 64), (5, 64), (1, 64)] {
            let session = SessionId::new();
            let dir = root.path().join(session.to_string()).join("1");
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("out.bin"), vec![7u8; kib * 1024]).unwrap();
            keep(&dir, "bucket gone").unwrap();
            kept_since(&dir, day * age_days as u32);
            made.push((session, dir));
        }
        // A dir that is not kept is none of this function's business, nor
        // is one whose run is alive (this process's running mark), however
        // old and large.
        let plain = root.path().join(SessionId::new().to_string()).join("1");
        fs::create_dir_all(&plain).unwrap();
        let live = root.path().join(SessionId::new().to_string()).join("1");
        fs::create_dir_all(&live).unwrap();
        fs::write(live.join("big.bin"), vec![1u8; 256 * 1024]).unwrap();
        mark_running(&live).unwrap();
        kept_since(&live, day * 90);
        // A new reason does not make a mark younger.
        keep(&made[0].1, "still not stored").unwrap();
        let retention = KeptRetention {
            max_age: day * 30,
            // Room for two of the 64 KiB dirs (and their blocks' slack).
            max_bytes: 150 * 1024,
        };
        let pruned = prune_kept(root.path(), retention).unwrap();
        let what: Vec<_> = pruned.iter().map(|p| (p.session, p.bound)).collect();
        assert_eq!(what, vec![(made[0].0, "age"), (made[1].0, "size")]);
        assert!(pruned[1].bytes >= 64 * 1024, "{:?}", pruned[1]);
        assert!(!made[0].1.exists() && !made[1].1.exists());
        assert!(made[2].1.exists() && made[3].1.exists() && plain.exists());
        assert!(live.join("big.bin").exists(), "a live run's dir stays");
        assert_eq!(kept_reason(&made[0].1), None, "the mark went with it");
        // Within the bounds now: nothing more.
        assert!(prune_kept(root.path(), retention).unwrap().is_empty());
    }
}
