//! The walk's traversal: each directory is listed once, its entries sorted
//! by name and judged while its handle is open — a regular file `lstat`ed
//! relative to that handle (`fstatat`), not by a path from the scratch dir
//! — then closed before the walk goes into a subdirectory, so one handle
//! is open at a time however deep the tree. Names are kept in one buffer
//! per directory, not one allocation each.
//!
//! What it reports is what a `walkdir` walk sorted by file name reports:
//! the same order (a directory's unreadable entries first, then its
//! entries by name, a subdirectory's contents right after it), the same
//! skips and the same error texts.

use std::ffi::{CStr, OsStr};
use std::fs;
use std::io;
use std::ops::Range;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{openat, statat, AtFlags, Dir, FileType, Mode, OFlags, CWD};

use korvus_workspace::WorkspacePath;

use super::{Candidate, SkipReason, Skipped};
use crate::stat::FileStat;

/// One entry of a directory, judged while the directory was open.
#[derive(Debug)]
pub(super) enum Item {
    /// Left out, and why; a directory is not descended into.
    Skip(Skipped),
    /// A directory to descend into, by its workspace path.
    Dir(WorkspacePath),
    /// A regular file, with its `lstat`.
    File(Candidate),
}

/// The names of one directory, each NUL-terminated in one buffer, with
/// their types as listed.
#[derive(Default)]
struct Names {
    bytes: Vec<u8>,
    /// Where each name is in `bytes` (its NUL after it), and its type.
    entries: Vec<(Range<usize>, FileType)>,
}

/// The name at `at` of `bytes`.
fn name_at<'a>(bytes: &'a [u8], at: &Range<usize>) -> &'a OsStr {
    OsStr::from_bytes(&bytes[at.clone()])
}

/// The name at `at` of `bytes`, with its NUL.
fn c_name_at<'a>(bytes: &'a [u8], at: &Range<usize>) -> &'a CStr {
    // Stored with its NUL after it, and a name holds none.
    CStr::from_bytes_with_nul(&bytes[at.start..=at.end]).unwrap_or_default()
}

/// The items of the directory `rel` of `scratch` (`None`: the scratch dir
/// itself) in walk order. A directory that cannot be listed is one
/// unreadable item; a scratch dir that is not a directory has none.
pub(super) fn list(
    scratch: &Path,
    rel: Option<&WorkspacePath>,
    skip_prefixes: &[WorkspacePath],
) -> Vec<Item> {
    let dir = match rel {
        Some(rel) => scratch.join(rel.as_str()),
        None => scratch.to_path_buf(),
    };
    let cannot_list = |e: rustix::io::Errno| {
        let path = rel.map(|r| r.as_str().to_owned()).unwrap_or_default();
        vec![unreadable(path, &dir, e.into())]
    };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let opened = openat(CWD, &dir, flags, Mode::empty()).and_then(Dir::new);
    let mut listing = match opened {
        Ok(listing) => listing,
        Err(_) if rel.is_none() && fs::metadata(&dir).is_ok_and(|md| !md.is_dir()) => {
            return Vec::new();
        }
        Err(e) => return cannot_list(e),
    };
    let (mut names, failed) = read_names(&mut listing);
    let fd = match listing.fd() {
        Ok(fd) => fd,
        Err(e) => return cannot_list(e),
    };
    let judge = Judge {
        dir: &dir,
        rel,
        fd,
        skip_prefixes,
    };
    // As `walkdir` sorts them: the entries it could not read first, in the
    // order met; the others by name.
    let mut items = judge.types(&mut names);
    items.extend(failed.map(|e| {
        Item::Skip(Skipped {
            path: String::new(),
            reason: SkipReason::Unreadable {
                error: io::Error::from(e).to_string(),
            },
        })
    }));
    let Names { bytes, entries } = &mut names;
    entries.sort_unstable_by(|a, b| bytes[a.0.clone()].cmp(&bytes[b.0.clone()]));
    items.reserve(entries.len());
    for (at, ft) in entries.iter() {
        items.push(judge.item(name_at(bytes, at), c_name_at(bytes, at), *ft));
    }
    items
}

/// The names `listing` holds (not `.` and `..`) with their types, and the
/// error that ended the listing early, if one did.
fn read_names(listing: &mut Dir) -> (Names, Option<rustix::io::Errno>) {
    let mut names = Names::default();
    while let Some(next) = listing.read() {
        let entry = match next {
            Ok(entry) => entry,
            Err(e) => return (names, Some(e)),
        };
        let name = entry.file_name().to_bytes_with_nul();
        if name == b".\0" || name == b"..\0" {
            continue;
        }
        let start = names.bytes.len();
        names.bytes.extend_from_slice(name);
        let end = names.bytes.len() - 1;
        names.entries.push((start..end, entry.file_type()));
    }
    (names, None)
}

/// One open directory, its entries judged relative to its handle.
struct Judge<'a> {
    /// Its path, in error texts.
    dir: &'a Path,
    /// Its workspace path; `None` for the scratch dir.
    rel: Option<&'a WorkspacePath>,
    fd: BorrowedFd<'a>,
    skip_prefixes: &'a [WorkspacePath],
}

impl Judge<'_> {
    /// Tells the type of each entry the listing did not (`lstat`, as
    /// `std` does); an entry whose type cannot be told leaves `names` and
    /// is an unreadable item.
    fn types(&self, names: &mut Names) -> Vec<Item> {
        let mut items = Vec::new();
        let Names { bytes, entries } = names;
        entries.retain_mut(|(at, ft)| {
            if *ft != FileType::Unknown {
                return true;
            }
            match statat(self.fd, c_name_at(bytes, at), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => {
                    *ft = FileType::from_raw_mode(st.st_mode);
                    true
                }
                Err(e) => {
                    let name = name_at(bytes, at);
                    let path = text_of(self.rel, name);
                    items.push(unreadable(path, &self.dir.join(name), e.into()));
                    false
                }
            }
        });
        items
    }

    /// What the walk makes of the entry `name` of type `ft`.
    fn item(&self, name: &OsStr, c_name: &CStr, ft: FileType) -> Item {
        let skip = |path: String, reason| Item::Skip(Skipped { path, reason });
        if name.as_bytes().first() == Some(&b'.') {
            return skip(text_of(self.rel, name), SkipReason::Hidden);
        }
        let Some(path) = name
            .to_str()
            .and_then(|name| WorkspacePath::new(joined(self.rel, name)).ok())
        else {
            return skip(text_of(self.rel, name), SkipReason::InvalidName);
        };
        if self.skip_prefixes.iter().any(|p| path.is_under(p)) {
            return skip(path.as_str().to_owned(), SkipReason::ReadOnly);
        }
        match ft {
            FileType::Directory => return Item::Dir(path),
            FileType::RegularFile => {}
            _ => {
                let kind = kind_of(ft).to_owned();
                return skip(path.as_str().to_owned(), SkipReason::NotRegular { kind });
            }
        }
        match statat(self.fd, c_name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => {
                let stat = FileStat::of_stat(&st);
                Item::File(Candidate {
                    path,
                    size: stat.size,
                    stat: Some(stat),
                })
            }
            Err(e) => unreadable(path.as_str().to_owned(), &self.dir.join(name), e.into()),
        }
    }
}

/// What an entry that is not a directory or a regular file is.
fn kind_of(ft: FileType) -> &'static str {
    match ft {
        FileType::Symlink => "symlink",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::BlockDevice | FileType::CharacterDevice => "device",
        _ => "other",
    }
}

/// An entry (or directory) that could not be read, its error worded as
/// `walkdir` words it: with the path it was reached by.
fn unreadable(path: String, at: &Path, e: io::Error) -> Item {
    Item::Skip(Skipped {
        path,
        reason: SkipReason::Unreadable {
            error: format!("IO error for operation on {}: {e}", at.display()),
        },
    })
}

/// `name` in the directory `rel`, as workspace-relative text.
fn joined(rel: Option<&WorkspacePath>, name: &str) -> String {
    match rel {
        Some(rel) => {
            let mut text = String::with_capacity(rel.as_str().len() + 1 + name.len());
            text.push_str(rel.as_str());
            text.push('/');
            text.push_str(name);
            text
        }
        None => name.to_owned(),
    }
}

/// `name` in the directory `rel` as text, lossy where it is not UTF-8.
fn text_of(rel: Option<&WorkspacePath>, name: &OsStr) -> String {
    joined(rel, &name.to_string_lossy())
}
