//! Running the agent as another user: [`AgentUser`], and handing the
//! scratch dir over to it before the program starts.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::CommandError;

/// The user an agent runs as ([`CommandRunner::run_as`](crate::CommandRunner::run_as)).
/// An agent running under its own uid cannot read the embedding process's
/// `/proc/<pid>/environ` nor signal it, and owns only what was made
/// writable for it in its scratch dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentUser {
    name: String,
    uid: u32,
    gid: u32,
}

impl AgentUser {
    /// The user called `name` in the user database, with its primary group.
    ///
    /// # Errors
    /// [`CommandError::UnknownUser`] when there is no such user or the
    /// database cannot be read.
    pub fn lookup(name: &str) -> Result<Self, CommandError> {
        let unknown = |reason: String| CommandError::UnknownUser {
            name: name.to_owned(),
            reason,
        };
        match nix::unistd::User::from_name(name) {
            Ok(Some(user)) => Ok(Self {
                name: user.name,
                uid: user.uid.as_raw(),
                gid: user.gid.as_raw(),
            }),
            Ok(None) => Err(unknown("no such user".to_owned())),
            Err(e) => Err(unknown(e.to_string())),
        }
    }

    /// A user given by ids; `name` becomes the agent's `USER` and `LOGNAME`.
    pub fn new(name: impl Into<String>, uid: u32, gid: u32) -> Self {
        Self {
            name: name.into(),
            uid,
            gid,
        }
    }

    /// The user's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The user id.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The primary group id.
    pub fn gid(&self) -> u32 {
        self.gid
    }

    /// Checks that this user can walk to `dir` and into it: every
    /// directory from the root down to `dir` itself must be searchable by
    /// it. Call it on a scratch root before any session is created, so a
    /// root the agent user cannot reach is refused up front instead of
    /// failing every run.
    ///
    /// # Errors
    /// [`CommandError::Unreachable`] naming the first directory it may not
    /// search; [`CommandError::HandOver`] when one cannot be read.
    pub fn check_reach(&self, dir: &Path) -> Result<(), CommandError> {
        let mut ancestors: Vec<&Path> = dir.ancestors().collect();
        ancestors.reverse();
        for d in ancestors {
            let meta = std::fs::metadata(d).map_err(|source| CommandError::HandOver {
                user: self.name.clone(),
                path: d.to_path_buf(),
                source,
            })?;
            if !self.may_search(meta.uid(), meta.gid(), meta.mode()) {
                return Err(CommandError::Unreachable {
                    user: self.name.clone(),
                    dir: d.to_path_buf(),
                });
            }
        }
        Ok(())
    }

    /// Whether this user may execute the regular file `file` (its
    /// directories searchable, an execute bit of its class set; root needs
    /// any execute bit).
    pub fn may_execute(&self, file: &Path) -> bool {
        let Some(parent) = file.parent() else {
            return false;
        };
        let Ok(meta) = std::fs::metadata(file) else {
            return false;
        };
        let bit = if self.uid == 0 {
            0o111
        } else if meta.uid() == self.uid {
            0o100
        } else if meta.gid() == self.gid {
            0o010
        } else {
            0o001
        };
        meta.is_file() && meta.mode() & bit != 0 && self.check_reach(parent).is_ok()
    }

    /// Whether `mode` (of a directory owned by `owner`:`group`) lets this
    /// user walk through it.
    fn may_search(&self, owner: u32, group: u32, mode: u32) -> bool {
        let bit = if self.uid == 0 {
            return true;
        } else if owner == self.uid {
            0o100
        } else if group == self.gid {
            0o010
        } else {
            0o001
        };
        mode & bit != 0
    }
}

/// Makes `scratch` the agent's: checks that `user` can reach it, then
/// gives it every entry of the tree that is writable by its owner (the
/// scratch dir, restored outputs, the private `HOME` and `TMPDIR`).
/// Read-only entries (the seeded repository trees) keep their owner, so
/// the agent cannot make them writable. Runs before the program starts,
/// on a tree only the manager has written.
pub(crate) fn hand_over(scratch: &Path, user: &AgentUser) -> Result<(), CommandError> {
    let failed = |path: &Path, source: std::io::Error| CommandError::HandOver {
        user: user.name.clone(),
        path: path.to_path_buf(),
        source,
    };
    for dir in scratch.ancestors().skip(1) {
        let meta = std::fs::metadata(dir).map_err(|e| failed(dir, e))?;
        if !user.may_search(meta.uid(), meta.gid(), meta.mode()) {
            return Err(CommandError::Unreachable {
                user: user.name.clone(),
                dir: dir.to_path_buf(),
            });
        }
    }
    let mut pending: Vec<PathBuf> = vec![scratch.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).map_err(|e| failed(&path, e))?;
        if meta.file_type().is_symlink() {
            continue;
        }
        if meta.mode() & 0o200 != 0 {
            std::os::unix::fs::lchown(&path, Some(user.uid), Some(user.gid))
                .map_err(|e| failed(&path, e))?;
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(|e| failed(&path, e))? {
                pending.push(entry.map_err(|e| failed(&path, e))?.path());
            }
        }
    }
    Ok(())
}

/// Hands the scratch dir over to the agent `user`, if there is one, on a
/// blocking thread ([`hand_over`]).
pub(crate) async fn hand_over_to(
    user: Option<AgentUser>,
    scratch: &Path,
) -> Result<(), CommandError> {
    let Some(user) = user else {
        return Ok(());
    };
    let name = user.name().to_owned();
    let path = scratch.to_path_buf();
    let scratch = path.clone();
    tokio::task::spawn_blocking(move || hand_over(&scratch, &user))
        .await
        .map_err(|e| CommandError::HandOver {
            user: name,
            path,
            source: std::io::Error::other(e),
        })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_permission_follows_owner_group_and_others() {
        let user = AgentUser::new("agent", 1000, 1000);
        assert!(user.may_search(1000, 0, 0o700));
        assert!(!user.may_search(0, 0, 0o700));
        assert!(user.may_search(0, 1000, 0o750));
        assert!(!user.may_search(0, 1000, 0o705));
        assert!(user.may_search(0, 0, 0o711));
        assert!(AgentUser::new("root", 0, 0).may_search(5, 5, 0o000));
    }

    #[test]
    fn an_unknown_user_is_a_typed_error() {
        let err = AgentUser::lookup("korvus-no-such-user-4242").unwrap_err();
        assert!(matches!(err, CommandError::UnknownUser { .. }), "{err}");
    }
}
