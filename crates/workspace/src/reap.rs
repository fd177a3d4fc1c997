//! Removing what runs left behind: [`reap`] (everything a crash left under
//! a scratch root), [`reap_sessions`] and [`reap_session_through`] — and
//! the one thing they never remove, a **kept** iteration dir.
//!
//! A run whose output could not be stored (the blob store refused it, the
//! rows could not be written) leaves its scratch dir as the only copy of
//! what its agent made. [`keep`] marks it: a file
//! `<root>/<session>/<revision>.kept` beside the dir — outside what the
//! agent may write, like the agent records — holds the reason. Every
//! removal here skips a kept dir (and says so in [`Reaped::kept`]) until
//! [`unkeep`] clears the mark once the output is stored.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use korvus_store::SessionId;
use uuid::Uuid;

use crate::error::blocking;
use crate::fsutil::remove_tree;
use crate::Result;
use crate::WorkspaceError;

use crate::kept::KEPT_EXTENSION;
pub use crate::kept::{keep, kept_reason, unkeep};

/// Removes everything under the scratch root `root` except kept
/// iteration dirs, when it holds any: `true` then (the root stays, with
/// them); `false`, touching nothing, when it holds none.
pub(crate) fn release_root(root: &Path) -> Result<bool> {
    let Ok(list) = fs::read_dir(root) else {
        return Ok(false);
    };
    let sessions: Vec<(PathBuf, Option<SessionId>)> = list
        .flatten()
        .map(|e| (e.path(), e.file_name().to_str().and_then(session_dir_name)))
        .collect();
    if !sessions.iter().any(|(p, _)| holds_kept(p)) {
        return Ok(false);
    }
    for (path, session) in sessions {
        match session {
            Some(session) if holds_kept(&path) => {
                reap_through(&path, session, u32::MAX)?;
            }
            _ => remove_tree(&path)
                .or_else(|e| {
                    if e.kind() == io::ErrorKind::NotFound {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })
                .map_err(|e| WorkspaceError::io("remove", &path, e))?,
        }
    }
    Ok(true)
}

/// Whether the session dir `path` holds the mark of a kept iteration.
fn holds_kept(path: &Path) -> bool {
    fs::read_dir(path).is_ok_and(|list| {
        list.flatten().any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.ends_with(&format!(".{KEPT_EXTENSION}")))
        })
    })
}

/// What [`reap`] did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Reaped {
    /// Directories removed, by the session id their name parsed as.
    pub removed: Vec<SessionId>,
    /// Directories that could not be removed (completely), with the cause.
    /// The sweep goes on past them.
    pub failed: Vec<(PathBuf, io::Error)>,
    /// Agent process groups a dead run had recorded and that were still
    /// alive, stopped before their session's dir was removed.
    pub agents_stopped: Vec<i32>,
    /// Iteration dirs left in place because their output is not stored
    /// ([`keep`]), with the reason their mark gives.
    pub kept: Vec<(PathBuf, String)>,
}

/// Removes the scratch dirs a crash left under `root`.
///
/// Only real directories whose names are canonical hyphenated lower-case
/// UUIDs (the form [`create`](crate::create()) and [`create_iteration`](crate::create_iteration()) use) are removed,
/// whole: a session's dir of either layout, with every iteration's dir in
/// it. Files, other names and
/// symlinks — even ones named like a UUID — are left alone, and no symlink is
/// ever followed, inside a removed directory either. Before a session's dir
/// is removed, the agent process groups its runs recorded
/// ([`record_agent`](crate::record_agent)) and that are still alive are
/// stopped with `SIGKILL` ([`Reaped::agents_stopped`]). Call it when no
/// session of this process runs under `root`; a directory of a live
/// session would be removed, and its agent stopped.
///
/// # Errors
/// [`WorkspaceError::Io`] when `root` cannot be listed. Failures to remove
/// one directory are reported in [`Reaped::failed`].
///
/// # Cancel safety
/// Not cancel-safe: the sweep runs on a blocking task that finishes even if
/// this future is dropped.
pub async fn reap(root: &Path) -> Result<Reaped> {
    let all = session_dirs(root).await?;
    reap_sessions(root, all).await
}

/// The sessions that have a scratch dir under `root`: real directories
/// named as [`create`](crate::create()) names them (symlinks and other names are not), in
/// id order.
///
/// # Errors
/// [`WorkspaceError::Io`] when `root` cannot be listed.
///
/// # Cancel safety
/// Cancel safe: it only lists `root`.
pub async fn session_dirs(root: &Path) -> Result<Vec<SessionId>> {
    let root = root.to_path_buf();
    blocking(move || {
        let list = fs::read_dir(&root).map_err(|e| WorkspaceError::io("list", &root, e))?;
        let mut out = Vec::new();
        for entry in list {
            let entry = entry.map_err(|e| WorkspaceError::io("list", &root, e))?;
            let Some(session) = entry.file_name().to_str().and_then(session_dir_name) else {
                continue;
            };
            // `file_type` from lstat: a symlink is a symlink, not a directory.
            if fs::symlink_metadata(entry.path()).is_ok_and(|m| m.file_type().is_dir()) {
                out.push(session);
            }
        }
        out.sort();
        Ok(out)
    })
    .await
}

/// Removes the scratch dirs of `sessions` under `root`, as [`reap`] does
/// (recorded agents stopped first, no symlink followed); sessions without
/// a dir are skipped. Use it to spare the dirs of sessions that still run.
///
/// # Errors
/// As [`reap`]; failures to remove one directory are in [`Reaped::failed`].
///
/// # Cancel safety
/// As [`reap`]: the removal runs on a blocking task that finishes even if
/// this future is dropped, and the caller does not learn what it removed.
pub async fn reap_sessions(root: &Path, sessions: Vec<SessionId>) -> Result<Reaped> {
    let root = root.to_path_buf();
    blocking(move || {
        let mut out = Reaped::default();
        for session in sessions {
            let path = root.join(session.to_string());
            match fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_dir() => {}
                _ => continue,
            }
            // A kept iteration stays: everything else of the session goes.
            if holds_kept(&path) {
                let one = reap_through(&path, session, u32::MAX)?;
                out.removed.extend(one.removed);
                out.failed.extend(one.failed);
                out.agents_stopped.extend(one.agents_stopped);
                out.kept.extend(one.kept);
                continue;
            }
            // Agents a dead run left behind would go on writing (or hold
            // files) in the tree: stop them first.
            out.agents_stopped
                .extend(crate::agents::stop_recorded_agents(&path));
            match remove_tree(&path) {
                Ok(()) => out.removed.push(session),
                // Removed meanwhile (a run's own clean-up): nothing left.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => out.failed.push((path, e)),
            }
        }
        Ok(out)
    })
    .await
}

/// Removes what the runs of `session` up to revision `through` left under
/// `root`, and nothing of a later run: the agent process groups those
/// revisions recorded (`<session>/<revision>.agent`) are stopped, their
/// iteration dirs (`<session>/<revision>`) removed, and then the session's
/// dir when nothing else is left in it. A revision above `through` — a run
/// that started after the caller read the session's row, e.g. a reopen
/// racing `korvus reap --apply` — is never touched: read the row, check it
/// is not active, and pass its revision. A session dir of the one-dir
/// layout ([`create`](crate::create()), no iteration dirs in it) is removed whole, as
/// [`reap_sessions`] does. No symlink is followed.
///
/// # Errors
/// [`WorkspaceError::Io`] when the session's dir cannot be listed;
/// failures to remove a directory are in [`Reaped::failed`].
///
/// # Cancel safety
/// As [`reap`].
pub async fn reap_session_through(root: &Path, session: SessionId, through: u32) -> Result<Reaped> {
    let path = root.join(session.to_string());
    blocking(move || reap_through(&path, session, through)).await
}

/// [`reap_session_through`] of the session dir `path`, on this thread.
fn reap_through(path: &Path, session: SessionId, through: u32) -> Result<Reaped> {
    let mut out = Reaped::default();
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_dir() => {}
        _ => return Ok(out),
    }
    let list = fs::read_dir(path).map_err(|e| WorkspaceError::io("list", path, e))?;
    let (mut dirs, mut records, mut iterations) = (Vec::new(), Vec::new(), false);
    for entry in list {
        let entry = entry.map_err(|e| WorkspaceError::io("list", path, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let (stem, record) =
            match name.strip_suffix(&format!(".{}", crate::agents::RECORD_EXTENSION)) {
                Some(stem) => (stem, true),
                None => (name, false),
            };
        let Ok(revision) = stem.parse::<u32>() else {
            continue;
        };
        iterations = true;
        if revision > through {
            continue;
        }
        if record {
            records.push(entry.path());
        } else if fs::symlink_metadata(entry.path()).is_ok_and(|m| m.file_type().is_dir()) {
            dirs.push(entry.path());
        }
    }
    if !iterations {
        // The one-dir layout: the session's dir is the scratch dir.
        out.agents_stopped
            .extend(crate::agents::stop_recorded_agents(path));
        match remove_tree(path) {
            Ok(()) => out.removed.push(session),
            // Its run's own clean-up removed it meanwhile.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => out.failed.push((path.to_path_buf(), e)),
        }
        return Ok(out);
    }
    for record in records {
        out.agents_stopped
            .extend(crate::agents::stop_record(&record));
        let _ = fs::remove_file(&record);
    }
    for dir in dirs {
        // The only copy of output that could not be stored.
        if let Some(reason) = kept_reason(&dir) {
            out.kept.push((dir, reason));
            continue;
        }
        match remove_tree(&dir) {
            // Its run's own clean-up removed it meanwhile.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => out.failed.push((dir, e)),
            Ok(()) => {}
        }
    }
    if fs::remove_dir(path).is_ok() {
        out.removed.push(session);
    }
    Ok(out)
}

/// The session id `name` is the scratch dir name of, if it is one.
fn session_dir_name(name: &str) -> Option<SessionId> {
    let uuid = Uuid::try_parse(name).ok()?;
    // `try_parse` also accepts braced, URN and simple forms; only the form
    // `create` writes counts.
    (uuid.hyphenated().to_string() == name).then(|| SessionId::from_uuid(uuid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_uuid_names_are_session_dirs() {
        let id = Uuid::now_v7();
        assert!(session_dir_name(&id.to_string()).is_some());
        assert!(session_dir_name(&id.to_string().to_uppercase()).is_none());
        assert!(session_dir_name(&id.simple().to_string()).is_none());
        assert!(session_dir_name(&id.braced().to_string()).is_none());
        assert!(session_dir_name(&id.urn().to_string()).is_none());
        assert!(session_dir_name("korvus-scratch-x").is_none());
    }

    #[tokio::test]
    async fn a_kept_iteration_survives_every_removal_until_it_is_unkept() {
        let root = tempfile::tempdir().unwrap();
        let session = SessionId::new();
        let kept = crate::create_iteration(root.path(), session, 1)
            .await
            .unwrap();
        std::fs::write(kept.path().join("report.md"), "only copy").unwrap();
        let gone = crate::create_iteration(root.path(), session, 2)
            .await
            .unwrap();
        keep(kept.path(), "the blob store refused it:\nbucket gone").unwrap();
        assert_eq!(
            kept_reason(kept.path()).as_deref(),
            Some("the blob store refused it: bucket gone")
        );
        assert_eq!(kept_reason(gone.path()), None);

        let reaped = reap(root.path()).await.unwrap();
        assert!(kept.path().join("report.md").exists(), "reap keeps it");
        assert!(!gone.path().exists(), "the rest of the session goes");
        assert_eq!(reaped.kept.len(), 1);
        assert_eq!(reaped.kept[0].0, kept.path());
        let reaped = reap_session_through(root.path(), session, u32::MAX)
            .await
            .unwrap();
        assert_eq!(reaped.kept.len(), 1);
        assert!(kept.path().exists(), "reap_session_through keeps it");

        unkeep(kept.path()).unwrap();
        unkeep(kept.path()).unwrap();
        let reaped = reap(root.path()).await.unwrap();
        assert!(reaped.kept.is_empty());
        assert_eq!(reaped.removed, vec![session]);
        assert!(!root.path().join(session.to_string()).exists());
    }

    #[tokio::test]
    async fn an_owned_root_with_a_kept_dir_stays_with_it() {
        let parent = tempfile::tempdir().unwrap();
        let root = crate::ScratchRoot::create_owned(parent.path())
            .await
            .unwrap();
        let path = root.path().to_path_buf();
        let kept = root.create_iteration(SessionId::new(), 1).await.unwrap();
        let other = root.create_iteration(SessionId::new(), 1).await.unwrap();
        keep(kept.path(), "not stored").unwrap();
        root.release().await.unwrap();
        assert!(kept.path().exists());
        assert!(!other.path().exists());
        assert!(path.exists());
    }
}
