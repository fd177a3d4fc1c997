//! File access beneath a directory korvus made but the agent can change.
//!
//! The scratch dir and the agent's private `HOME` are the agent's: while
//! it runs (a checkpoint copies its thread) and after (a dead agent leaves
//! whatever links it made), any of their directories may have been swapped
//! for a symbolic link. Every path here is resolved from a directory
//! descriptor with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so no
//! component is a link and nothing leaves the directory, and a file is
//! written as a new inode renamed into place: korvus, often root, reads and
//! writes only what sits inside. (Linux 5.6 or later; on an older kernel
//! the calls fail and the thread is not kept, with a note.)

use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// No symbolic link in any component, nothing outside the directory.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// A directory korvus names itself (the scratch dir), opened.
pub(crate) fn root(path: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    Ok(rustix::fs::open(path, flags, Mode::empty())?)
}

/// The directory `rel` beneath `at`, made (0755) level by level first
/// when `create`.
pub(crate) fn dir(at: impl AsFd, rel: &Path, create: bool) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd = rustix::fs::openat2(at, ".", flags, Mode::empty(), RESOLVE)?;
    for part in rel.components() {
        let Component::Normal(name) = part else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a plain relative path", rel.display()),
            ));
        };
        if create {
            match rustix::fs::mkdirat(&fd, name, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        fd = rustix::fs::openat2(&fd, name, flags, Mode::empty(), RESOLVE)?;
    }
    Ok(fd)
}

/// The regular file `rel` beneath `at`, open for reading (a FIFO or a
/// device is refused, never waited on).
pub(crate) fn open_regular(at: impl AsFd, rel: &Path) -> io::Result<File> {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK;
    let file = File::from(rustix::fs::openat2(at, rel, flags, Mode::empty(), RESOLVE)?);
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", rel.display()),
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
