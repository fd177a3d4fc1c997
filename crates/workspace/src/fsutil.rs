//! Small blocking filesystem helpers that never follow symlinks.

use std::fs::{self, DirBuilder, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use crate::{Result, WorkspaceError};

/// Mode of a scratch directory and of directories created inside it.
pub(crate) const DIR_MODE: u32 = 0o700;
/// Mode of a read-only file (seeded or context).
pub(crate) const READ_ONLY_FILE_MODE: u32 = 0o444;
/// Mode of a read-only directory (seeded trees, `context/`).
pub(crate) const READ_ONLY_DIR_MODE: u32 = 0o555;
/// Mode of a restored (writable) file.
pub(crate) const WRITABLE_FILE_MODE: u32 = 0o644;

/// Creates one directory (not its parents) with exactly `mode`.
pub(crate) fn make_dir(path: &Path, mode: u32) -> io::Result<()> {
    DirBuilder::new().mode(mode).create(path)?;
    // The umask may have cleared bits of `mode`; set it exactly.
    fs::set_permissions(path, Permissions::from_mode(mode))
}

/// Creates `path`'s missing parent directories below `base` (mode
/// [`DIR_MODE`]), refusing to walk through anything that is not a real
/// directory (a symlink, a file).
pub(crate) fn make_parents(base: &Path, rel: &Path) -> io::Result<()> {
    let Some(parent) = rel.parent() else {
        return Ok(());
    };
    let mut here = base.to_path_buf();
    for part in parent.components() {
        here.push(part);
        match fs::symlink_metadata(&here) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a directory", here.display()),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => match make_dir(&here, DIR_MODE) {
                Ok(()) => {}
                // Made meanwhile by a concurrent restore of a sibling.
                Err(e)
                    if e.kind() == io::ErrorKind::AlreadyExists
                        && fs::symlink_metadata(&here).is_ok_and(|m| m.is_dir()) => {}
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Sets `mode` on `path` and, for directories, on every directory below it
/// (files keep theirs). Symlinks are neither changed nor followed.
pub(crate) fn set_dir_modes(path: &Path, mode: u32) -> io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return Ok(());
    }
    // Children first: once a directory is 0555 a non-root caller can still
    // chmod below it, but doing it bottom-up keeps the order obvious.
    for entry in fs::read_dir(path)? {
        set_dir_modes(&entry?.path(), mode)?;
    }
    fs::set_permissions(path, Permissions::from_mode(mode))
}

/// Removes `path` and everything below it without following symlinks (a
/// symlink is removed, never its target). Read-only directories are made
/// writable first, so seeded trees can be removed by a non-root owner.
/// Iterative and descriptor-relative, so no depth is too deep.
pub(crate) use crate::remove::remove_tree;

/// [`remove_tree`], treating an already missing path as removed.
pub(crate) fn remove_tree_if_exists(path: &Path) -> Result<()> {
    match remove_tree(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(WorkspaceError::io("remove", path, e)),
    }
}
