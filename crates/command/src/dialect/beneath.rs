//! File access beneath a directory korvus made but the agent can change.
//!
//! The scratch dir and the agent's private `HOME` are the agent's: while
//! it runs (a checkpoint copies its thread) and after (a dead agent leaves
//! whatever links it made), any of their directories may have been swapped
//! for a symbolic link, and any file may be a hard link to one elsewhere.
//! Every path here is opened one component at a time from a directory
//! descriptor with `O_NOFOLLOW` (no `..`, no link followed, so nothing
//! outside is reached — on any kernel), a file is read only when it is a
//! regular file with one link, and a file is written as a new inode
//! renamed into place: korvus, often root, reads and writes only what
//! sits inside.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Flags of a directory opened on the way down.
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// A directory korvus names itself (the scratch dir), opened.
pub(crate) fn root(path: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    Ok(rustix::fs::open(path, flags, Mode::empty())?)
}

/// The plain names of `rel`; anything else (`..`, a root) is refused.
fn names(rel: &Path) -> io::Result<Vec<&OsStr>> {
    rel.components()
        .map(|part| match part {
            Component::Normal(name) => Ok(name),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a plain relative path", rel.display()),
            )),
        })
        .collect()
}

/// The directory `rel` beneath `at`, made (0755) level by level first
/// when `create`.
pub(crate) fn dir(at: impl AsFd, rel: &Path, create: bool) -> io::Result<OwnedFd> {
    let mut fd = rustix::fs::openat(at, ".", DIR_FLAGS, Mode::empty())?;
    for name in names(rel)? {
        if create {
            match rustix::fs::mkdirat(&fd, name, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        fd = rustix::fs::openat(&fd, name, DIR_FLAGS, Mode::empty())?;
    }
    Ok(fd)
}

/// The regular file `rel` beneath `at`, open for reading: a FIFO or a
/// device is refused (never waited on), and so is a file with more than
/// one link (a hard link to a file elsewhere).
pub(crate) fn open_regular(at: impl AsFd, rel: &Path) -> io::Result<File> {
    let parent = dir(at, rel.parent().unwrap_or(Path::new("")), false)?;
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK;
    let file = File::from(rustix::fs::openat(&parent, name, flags, Mode::empty())?);
    let meta = file.metadata()?;
    if !meta.is_file() || meta.nlink() != 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file of one link", rel.display()),
        ));
    }
    Ok(file)
}

/// Up to `max` bytes of `file`; more is an error.
pub(crate) fn read_at_most(file: File, max: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("more than the {max} bytes kept"),
        ));
    }
    Ok(bytes)
}

/// The first regular file whose name ends with `suffix` in the tree at
/// `rel` beneath `at` (relative to `at`), looking at no more than `limit`
/// entries and descending into no link.
pub(crate) fn find(at: impl AsFd, rel: &Path, suffix: &str, limit: usize) -> Option<PathBuf> {
    let mut pending = vec![(dir(at, rel, false).ok()?, rel.to_path_buf())];
    let mut seen = 0;
    while let Some((fd, path)) = pending.pop() {
        for entry in Dir::read_from(&fd).ok()? {
            let entry = entry.ok()?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            seen += 1;
            if seen > limit {
                return None;
            }
            match entry.file_type() {
                FileType::Directory => {
                    if let Ok(sub) = rustix::fs::openat(&fd, name, DIR_FLAGS, Mode::empty()) {
                        pending.push((sub, path.join(name)));
                    }
                }
                FileType::RegularFile if name.as_bytes().ends_with(suffix.as_bytes()) => {
                    return Some(path.join(name));
                }
                _ => {}
            }
        }
    }
    None
}

/// Writes `bytes` as `name` in `dir`: a new file (whatever stood at its
/// temporary name is unlinked first, so no link planted there is written
/// through), renamed over `name`.
pub(crate) fn write(dir: impl AsFd, name: &str, bytes: &[u8]) -> io::Result<()> {
    let dir = dir.as_fd();
    let part = format!(".{name}.part");
    match rustix::fs::unlinkat(dir, part.as_str(), AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, part.as_str(), flags, Mode::from_raw_mode(0o644))?;
    File::from(fd).write_all(bytes)?;
    rustix::fs::renameat(dir, part.as_str(), dir, name)?;
    Ok(())
}

/// Unlinks every entry of `dir` but those named in `keep`: files and links
/// (never followed), and directories that are empty; a directory with
/// something in it stays (the walk removes nothing beneath it).
pub(crate) fn clear_except(dir: impl AsFd, keep: &[&str]) -> io::Result<()> {
    let dir = dir.as_fd();
    let mut names = Vec::new();
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_owned();
        if name != "." && name != ".." && !keep.iter().any(|k| name == *k) {
            names.push((name, entry.file_type() == FileType::Directory));
        }
    }
    for (name, is_dir) in names {
        let flags = if is_dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        match rustix::fs::unlinkat(dir, name.as_os_str(), flags) {
            Ok(()) | Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_in_any_component_are_refused() {
        let root_dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "secret").unwrap();
        std::os::unix::fs::symlink(outside.path(), root_dir.path().join("link")).unwrap();
        let fd = root(root_dir.path()).unwrap();
        assert!(dir(&fd, Path::new("link"), false).is_err());
        assert!(dir(&fd, Path::new("link/x"), true).is_err());
        assert!(!outside.path().join("x").exists(), "made through a link");
        assert!(open_regular(&fd, Path::new("link/secret")).is_err());
        assert!(open_regular(&fd, Path::new("../secret")).is_err());
        assert!(dir(&fd, Path::new("../x"), true).is_err());
    }

    #[test]
    fn a_write_replaces_a_planted_link_instead_of_following_it() {
        let root_dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "intact").unwrap();
        let fd = root(root_dir.path()).unwrap();
        let made = dir(&fd, Path::new("a/b"), true).unwrap();
        for name in ["f", ".f.part"] {
            std::os::unix::fs::symlink(&victim, root_dir.path().join("a/b").join(name)).unwrap();
            write(&made, "f", b"mine").unwrap();
            assert_eq!(std::fs::read_to_string(&victim).unwrap(), "intact");
            let f = root_dir.path().join("a/b/f");
            assert!(std::fs::symlink_metadata(&f).unwrap().is_file());
            assert_eq!(std::fs::read_to_string(&f).unwrap(), "mine");
            std::fs::remove_file(&f).unwrap();
        }
    }

    #[test]
    fn a_hard_link_is_refused_and_find_descends_into_no_link() {
        let root_dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim-th-1.jsonl");
        std::fs::write(&victim, "secret\n").unwrap();
        let sessions = root_dir.path().join("s/2026");
        std::fs::create_dir_all(&sessions).unwrap();
        std::fs::hard_link(&victim, sessions.join("rollout-th-1.jsonl")).unwrap();
        let fd = root(root_dir.path()).unwrap();
        let found = find(&fd, Path::new("s"), "-th-1.jsonl", 100).unwrap();
        assert_eq!(found, Path::new("s/2026/rollout-th-1.jsonl"));
        assert!(open_regular(&fd, &found).is_err(), "two links");
        // A linked directory is not descended into.
        std::os::unix::fs::symlink(outside.path(), root_dir.path().join("s/linked")).unwrap();
        assert_eq!(find(&fd, Path::new("s"), "victim-th-1.jsonl", 100), None);
        std::os::unix::fs::symlink(outside.path(), root_dir.path().join("t")).unwrap();
        assert_eq!(find(&fd, Path::new("t"), ".jsonl", 100), None);
    }

    #[test]
    fn clear_except_keeps_what_is_named_and_follows_nothing() {
        let root_dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("x"), "x").unwrap();
        let d = root_dir.path();
        for name in ["keep", "junk"] {
            std::fs::write(d.join(name), name).unwrap();
        }
        std::fs::create_dir(d.join("empty")).unwrap();
        std::fs::create_dir(d.join("full")).unwrap();
        std::fs::write(d.join("full/f"), "f").unwrap();
        std::os::unix::fs::symlink(outside.path(), d.join("link")).unwrap();
        clear_except(root(d).unwrap(), &["keep"]).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["full", "keep"]);
        assert!(outside.path().join("x").exists());
    }

    #[test]
    fn a_fifo_is_refused_without_waiting() {
        let root_dir = tempfile::tempdir().unwrap();
        let fifo = root_dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let fd = root(root_dir.path()).unwrap();
        assert!(open_regular(&fd, Path::new("fifo")).is_err());
        std::fs::write(root_dir.path().join("big"), vec![b'x'; 10]).unwrap();
        let big = open_regular(&fd, Path::new("big")).unwrap();
        assert!(read_at_most(big, 9).is_err());
        let ok = open_regular(&fd, Path::new("big")).unwrap();
        assert_eq!(read_at_most(ok, 10).unwrap().len(), 10);
    }
}
