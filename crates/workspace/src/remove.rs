//! Removing a directory tree an agent left, however deep: iteratively,
//! relative to directory descriptors, holding one descriptor at a time.
//!
//! A recursive walk of absolute paths fails on what an agent can plant: a
//! few thousand nested directories overflow the stack (aborting the
//! embedding process), outgrow `PATH_MAX`, or exhaust descriptors when one
//! stays open per level. Here the walk keeps only the current directory
//! open and a stack of names (plus the device and inode of each parent) in
//! memory; going up opens `..` and checks it is the directory it came
//! from, so a directory moved during the walk stops it instead of letting
//! it remove entries elsewhere. Symlinks are removed, never followed.

use std::ffi::{CStr, CString};
use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

/// Removes `path` and everything under it; a file or symlink at `path` is
/// removed itself.
pub(crate) fn remove_tree(path: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return fs::remove_file(path);
    }
    if meta.permissions().mode() & 0o700 != 0o700 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))?;
    }
    empty_dir(open_dir(rustix::fs::CWD, path)?)?;
    fs::remove_dir(path)
}

/// A directory the walk went down into: its name in its parent, and the
/// parent's identity, checked when the walk comes back up.
struct Level {
    name: CString,
    parent: (u64, u64),
}

/// Empties the directory `top` (which stays), depth first.
fn empty_dir(top: OwnedFd) -> io::Result<()> {
    let mut current = top;
    let mut levels: Vec<Level> = Vec::new();
    loop {
        match clear_files(&current)? {
            Some(child) => {
                let stat = rustix::fs::fstat(&current)?;
                let opened = open_child(&current, &child)?;
                levels.push(Level {
                    name: child,
                    parent: (stat.st_dev, stat.st_ino),
                });
                current = opened;
            }
            None => {
                let Some(level) = levels.pop() else {
                    return Ok(());
                };
                let parent = open_dir(&current, c"..")?;
                let stat = rustix::fs::fstat(&parent)?;
                if (stat.st_dev, stat.st_ino) != level.parent {
                    return Err(io::Error::other(
                        "a directory was moved while its tree was being removed",
                    ));
                }
                drop(current);
                rustix::fs::unlinkat(&parent, level.name.as_c_str(), AtFlags::REMOVEDIR)?;
                current = parent;
            }
        }
    }
}

/// Removes every non-directory entry of `dir` in one pass; returns the name
/// of a subdirectory left to descend into, if any.
fn clear_files(dir: &OwnedFd) -> io::Result<Option<CString>> {
    let mut subdir = None;
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::Unknown => {
                let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
                FileType::from_raw_mode(stat.st_mode)
            }
            known => known,
        };
        if kind == FileType::Directory {
            if subdir.is_none() {
                subdir = Some(name.to_owned());
            }
        } else {
            rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
        }
    }
    Ok(subdir)
}

/// Opens the subdirectory `name` of `dir`, first granting ourselves access
/// when a read-only tree took it away.
fn open_child(dir: &OwnedFd, name: &CStr) -> io::Result<OwnedFd> {
    let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if stat.st_mode & 0o700 != 0o700 {
        rustix::fs::chmodat(dir, name, Mode::from_raw_mode(0o700), AtFlags::empty())?;
    }
    open_dir(dir, name)
}

fn open_dir<Fd: AsFd, P: rustix::path::Arg>(dir: Fd, name: P) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deep_tree_is_removed_without_recursion() {
        let root = tempfile::tempdir().unwrap();
        let top = root.path().join("deep");
        fs::create_dir(&top).unwrap();
        // 3,000 levels, built relative to a descriptor like the walk: the
        // absolute path is far longer than PATH_MAX.
        let mut dir = open_dir(rustix::fs::CWD, &top).unwrap();
        for level in 0..3_000 {
            rustix::fs::mkdirat(&dir, c"d", Mode::from_raw_mode(0o755)).unwrap();
            if level % 500 == 0 {
                let file = rustix::fs::openat(
                    &dir,
                    c"f",
                    OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o444),
                )
                .unwrap();
                drop(file);
            }
            dir = open_dir(&dir, c"d").unwrap();
        }
        drop(dir);
        remove_tree(&top).unwrap();
        assert!(!top.exists());
    }

    #[test]
    fn read_only_trees_and_symlinks_are_handled() {
        let root = tempfile::tempdir().unwrap();
        let outside = root.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("keep"), "x").unwrap();
        let top = root.path().join("top");
        fs::create_dir_all(top.join("ro/inner")).unwrap();
        fs::write(top.join("ro/inner/file"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, top.join("ro/link")).unwrap();
        fs::set_permissions(top.join("ro/inner"), fs::Permissions::from_mode(0o555)).unwrap();
        fs::set_permissions(top.join("ro"), fs::Permissions::from_mode(0o555)).unwrap();
        remove_tree(&top).unwrap();
        assert!(!top.exists());
        assert!(outside.join("keep").exists(), "a symlink is never followed");
    }
}
