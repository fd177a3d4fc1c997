//! Scratch roots, per-session scratch dirs, release and reap.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use korvus_store::SessionId;
use uuid::Uuid;

use crate::error::blocking;
use crate::fsutil::{make_dir, remove_tree, remove_tree_if_exists, DIR_MODE};
use crate::{Result, WorkspaceError};

/// The directory scratch dirs are made in.
///
/// Either **supplied** by the embedder (used as given, never removed) or
/// **owned**: created by [`ScratchRoot::create_owned`] and removed by
/// [`ScratchRoot::release`]. Dropping a root removes nothing (no blocking
/// work in `Drop`); call `release` on shutdown.
#[derive(Debug)]
pub struct ScratchRoot {
    path: PathBuf,
    owned: bool,
}

impl ScratchRoot {
    /// Uses `path` as the root. It is never created or removed by this crate;
    /// it must exist when [`ScratchRoot::create`] is called.
    pub fn supplied(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            owned: false,
        }
    }

    /// Creates a fresh root `<parent>/korvus-scratch-<uuid>` (mode 0700) that
    /// this value owns. Its name is not a bare UUID, so a [`reap`] of
    /// `parent` never removes it.
    ///
    /// # Errors
    /// [`WorkspaceError::Io`] when the directory cannot be created.
    ///
    /// # Cancel safety
    /// Not cancel-safe: the directory is created on a blocking task that
    /// finishes even if this future is dropped, and then nobody owns it.
    pub async fn create_owned(parent: &Path) -> Result<Self> {
        let path = parent.join(format!("korvus-scratch-{}", Uuid::now_v7()));
        let p = path.clone();
        blocking(move || {
            make_dir(&p, DIR_MODE).map_err(|e| WorkspaceError::io("create root", &p, e))
        })
        .await?;
        Ok(Self { path, owned: true })
    }

    /// The root directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `true` when [`ScratchRoot::release`] removes the root.
    pub fn is_owned(&self) -> bool {
        self.owned
    }

    /// Creates this session's scratch dir; see [`create`].
    ///
    /// # Errors
    /// As [`create`].
    ///
    /// # Cancel safety
    /// As [`create`].
    pub async fn create(&self, session: SessionId) -> Result<ScratchDir> {
        create(&self.path, session).await
    }

    /// Creates this iteration's scratch dir; see [`create_iteration`].
    ///
    /// # Errors
    /// As [`create_iteration`].
    ///
    /// # Cancel safety
    /// As [`create_iteration`].
    pub async fn create_iteration(&self, session: SessionId, revision: u32) -> Result<ScratchDir> {
        create_iteration(&self.path, session, revision).await
    }

    /// Releases the root: an owned root is removed with everything in it
    /// (symlinks are removed, never followed); a supplied root is left as it
    /// is.
    ///
    /// # Errors
    /// [`WorkspaceError::Io`] when an owned root cannot be removed.
    ///
    /// # Cancel safety
    /// Not cancel-safe: removal runs on a blocking task that finishes even if
    /// this future is dropped.
    pub async fn release(self) -> Result<()> {
        if !self.owned {
            return Ok(());
        }
        let path = self.path;
        blocking(move || remove_tree_if_exists(&path)).await
    }
}

/// A scratch directory: one session's, `<root>/<session id>` (made by
/// [`create`]), or one iteration's, `<root>/<session id>/<revision>` (made by
/// [`create_iteration`]).
///
/// Not `Clone`: [`ScratchDir::release`] consumes it. Dropping it removes
/// nothing; a directory left behind by a crash is removed by [`reap`].
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
    session: SessionId,
    revision: Option<u32>,
}

impl ScratchDir {
    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The session it belongs to.
    pub fn session_id(&self) -> SessionId {
        self.session
    }

    /// The revision of an iteration's dir ([`create_iteration`]); `None` for
    /// a session's dir ([`create`]).
    pub fn revision(&self) -> Option<u32> {
        self.revision
    }

    /// Removes the directory and everything in it. Read-only seeded trees
    /// are made writable first; symlinks are removed, never followed. An
    /// iteration's dir also takes its session's dir with it when that is
    /// then empty (one non-recursive `rmdir`; a session dir still holding
    /// another iteration's dir, or anything else, stays).
    ///
    /// # Errors
    /// [`WorkspaceError::Io`] when something cannot be removed.
    ///
    /// # Cancel safety
    /// Not cancel-safe: removal runs on a blocking task that finishes even if
    /// this future is dropped.
    pub async fn release(self) -> Result<()> {
        let path = self.path;
        let iteration = self.revision.is_some();
        blocking(move || {
            remove_tree_if_exists(&path)?;
            match path.parent().filter(|_| iteration) {
                Some(session_dir) => remove_if_empty(session_dir),
                None => Ok(()),
            }
        })
        .await
    }
}

/// Removes `dir` if it is an empty directory; one that is missing or not
/// empty is left as it is.
fn remove_if_empty(dir: &Path) -> Result<()> {
    match fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::DirectoryNotEmpty
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(WorkspaceError::io("remove", dir, e)),
    }
}

/// Creates `<root>/<session id>` with one non-recursive `mkdir`, mode 0700.
///
/// The root must already exist. Session ids are freshly minted, so an
/// existing directory under one belongs to someone else: it is refused, not
/// reused or cleaned.
///
/// # Errors
/// [`WorkspaceError::AlreadyExists`] when the path exists (as anything, even
/// a symlink); [`WorkspaceError::Io`] for any other failure, e.g. a missing
/// root.
///
/// # Cancel safety
/// Not cancel-safe: the directory is created on a blocking task that finishes
/// even if this future is dropped; [`reap`] removes such leftovers.
pub async fn create(root: &Path, session: SessionId) -> Result<ScratchDir> {
    let path = root.join(session.to_string());
    let p = path.clone();
    blocking(move || make_fresh_dir(&p)).await?;
    Ok(ScratchDir {
        path,
        session,
        revision: None,
    })
}

/// Creates one iteration's scratch dir, `<root>/<session id>/<revision>`
/// (the revision in decimal), mode 0700.
///
/// The session's dir is made if it is missing (mode 0700) and reused if it
/// is a real directory, so a dir an earlier iteration left behind never
/// blocks a later one. The revision's dir is made with one non-recursive
/// `mkdir`: an existing one belongs to another run of that revision and is
/// refused, untouched. [`ScratchDir::release`] removes the revision's dir and
/// then the session's dir when it is empty; [`reap`] removes leftovers of
/// both layouts.
///
/// The root must already exist.
///
/// # Errors
/// [`WorkspaceError::AlreadyExists`] when the revision's dir exists (as
/// anything, even a symlink), or when the session's path exists and is not
/// a real directory (a file, a symlink — never followed);
/// [`WorkspaceError::Io`] for any other failure, e.g. a missing root.
///
/// # Cancel safety
/// Not cancel-safe: the directories are created on a blocking task that
/// finishes even if this future is dropped; [`reap`] removes such leftovers.
pub async fn create_iteration(
    root: &Path,
    session: SessionId,
    revision: u32,
) -> Result<ScratchDir> {
    let session_dir = root.join(session.to_string());
    let path = session_dir.join(revision.to_string());
    let p = path.clone();
    blocking(move || {
        make_session_dir(&session_dir)?;
        make_fresh_dir(&p)
    })
    .await?;
    Ok(ScratchDir {
        path,
        session,
        revision: Some(revision),
    })
}

/// Mode of `<root>/<session id>`: the owner's, plus search (not list) for
/// everyone else.
const SESSION_DIR_MODE: u32 = 0o711;

/// Makes `path` with one non-recursive `mkdir`: a directory already there
/// belongs to another run and is refused, untouched.
fn make_fresh_dir(path: &Path) -> Result<()> {
    match make_dir(path, DIR_MODE) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(WorkspaceError::AlreadyExists {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(WorkspaceError::io("create scratch directory", path, e)),
    }
}

/// Makes a session's dir, or accepts an existing one that is a real
/// directory (`lstat`: a symlink is refused, not followed). Others may
/// search it but not list it ([`SESSION_DIR_MODE`]), so an agent running
/// under a user of its own reaches the iteration dir handed to it.
fn make_session_dir(dir: &Path) -> Result<()> {
    match make_dir(dir, SESSION_DIR_MODE) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match fs::symlink_metadata(dir) {
            Ok(meta) if meta.file_type().is_dir() => Ok(()),
            Ok(_) => Err(WorkspaceError::AlreadyExists {
                path: dir.to_path_buf(),
            }),
            Err(e) => Err(WorkspaceError::io("inspect session directory", dir, e)),
        },
        Err(e) => Err(WorkspaceError::io("create session directory", dir, e)),
    }
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
}

/// Removes the scratch dirs a crash left under `root`.
///
/// Only real directories whose names are canonical hyphenated lower-case
/// UUIDs (the form [`create`] and [`create_iteration`] use) are removed,
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
/// named as [`create`] names them (symlinks and other names are not), in
/// id order.
///
/// # Errors
/// [`WorkspaceError::Io`] when `root` cannot be listed.
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
/// layout ([`create`], no iteration dirs in it) is removed whole, as
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
    blocking(move || {
        let mut out = Reaped::default();
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_dir() => {}
            _ => return Ok(out),
        }
        let list = fs::read_dir(&path).map_err(|e| WorkspaceError::io("list", &path, e))?;
        let (mut dirs, mut records, mut iterations) = (Vec::new(), Vec::new(), false);
        for entry in list {
            let entry = entry.map_err(|e| WorkspaceError::io("list", &path, e))?;
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
                .extend(crate::agents::stop_recorded_agents(&path));
            match remove_tree(&path) {
                Ok(()) => out.removed.push(session),
                // Its run's own clean-up removed it meanwhile.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => out.failed.push((path, e)),
            }
            return Ok(out);
        }
        for record in records {
            out.agents_stopped
                .extend(crate::agents::stop_record(&record));
            let _ = fs::remove_file(&record);
        }
        for dir in dirs {
            match remove_tree(&dir) {
                // Its run's own clean-up removed it meanwhile.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => out.failed.push((dir, e)),
                Ok(()) => {}
            }
        }
        if fs::remove_dir(&path).is_ok() {
            out.removed.push(session);
        }
        Ok(out)
    })
    .await
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
}
