//! The Landlock rules of a policy: `O_PATH` descriptors with the rights
//! granted beneath each, read access granted around private paths, and
//! the path resolution that makes a private path comparable with what a
//! walk from `/` meets.

use std::collections::BTreeSet;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use landlock::{AccessFs, BitFlags, ABI};
use rustix::fs::{FileType, Mode, OFlags};
use tracing::debug;

/// Open `O_PATH` descriptors and the rights granted beneath each.
#[derive(Default)]
pub(super) struct Rules(pub(super) Vec<(OwnedFd, BitFlags<AccessFs>)>);

impl Rules {
    /// Grants `access` beneath `path`, following symlinks (the caller named
    /// it). A missing path grants nothing.
    pub(super) fn grant(&mut self, path: &Path, access: BitFlags<AccessFs>) {
        match rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => self.push(fd, access),
            Err(e) => debug!(path = %path.display(), error = %e, "sandbox: path not granted"),
        }
    }

    /// Grants `access` on every entry of the filesystem that is not beneath
    /// a path of `private`: the siblings along each private path's
    /// ancestors. Symlinks get no rule of their own (their targets are
    /// judged where they lie), so none can lead into a private path.
    pub(super) fn grant_outside(
        &mut self,
        private: &BTreeSet<PathBuf>,
        access: BitFlags<AccessFs>,
    ) {
        let mut dirs = vec![PathBuf::from("/")];
        while let Some(dir) = dirs.pop() {
            let Ok(fd) = rustix::fs::open(
                &dir,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            ) else {
                continue;
            };
            let Ok(entries) = rustix::fs::Dir::read_from(&fd) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                let path = dir.join(std::ffi::OsStr::from_bytes(name));
                if private.contains(&path) {
                    continue;
                }
                if private.iter().any(|p| p.starts_with(&path)) {
                    dirs.push(path);
                    continue;
                }
                let Ok(child) = rustix::fs::openat(
                    &fd,
                    entry.file_name(),
                    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                ) else {
                    continue;
                };
                self.push(child, access);
            }
        }
    }

    /// Keeps `fd` with the part of `access` its file type takes; a symlink
    /// gets nothing.
    fn push(&mut self, fd: OwnedFd, access: BitFlags<AccessFs>) {
        let Ok(stat) = rustix::fs::fstat(fd.as_fd()) else {
            return;
        };
        let access = match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink => return,
            FileType::Directory => access,
            _ => access & AccessFs::from_file(ABI::V8),
        };
        if !access.is_empty() {
            self.0.push((fd, access));
        }
    }
}

/// `path` made absolute with its existing part's symlinks resolved, so it
/// compares with the paths the walk from `/` meets.
pub(super) fn resolved(path: &Path) -> PathBuf {
    let path = normal(&std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
    let mut existing = path.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(real, |acc, c| acc.join(c));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return path,
        }
    }
}

/// `path` with `.` and `..` folded away lexically.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_private_path_resolves_beneath_its_real_parent() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(resolved(&dir.path().join("a/../b/c")), real.join("b/c"));
        assert_eq!(resolved(&dir.path().join("x.db")), real.join("x.db"));
    }
}
