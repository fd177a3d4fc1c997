//! The walk's traversal: each directory is listed once, its entries sorted
//! by name and judged while its handle is open — a regular file `lstat`ed
//! relative to that handle (`fstatat`, as a bare `read_dir` + `metadata`
//! walk does), not by a path from the scratch dir — then closed before the
//! walk goes into a subdirectory, so one handle is open at a time however
//! deep the tree.
//!
//! What it reports is what a `walkdir` walk sorted by file name reports:
//! the same order (a directory's unreadable entries first, then its
//! entries by name, a subdirectory's contents right after it), the same
//! skips and the same error texts.

use std::ffi::OsStr;
use std::fs::{self, DirEntry, FileType};
use std::io;
use std::path::Path;

use korvus_workspace::WorkspacePath;

use super::{kind_of, Candidate, SkipReason, Skipped};
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
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(_) if rel.is_none() && fs::metadata(&dir).is_ok_and(|md| !md.is_dir()) => {
            return Vec::new();
        }
        Err(e) => {
            let path = rel.map(|r| r.as_str().to_owned()).unwrap_or_default();
            return vec![unreadable(path, &dir, &e)];
        }
    };
    // As `walkdir` sorts them: entries it could not read first, in the
    // order met; the others by name.
    let mut items = Vec::new();
    let mut named = Vec::new();
    for next in entries {
        match next {
            Ok(entry) => match entry.file_type() {
                Ok(ft) => named.push((entry.file_name(), ft, entry)),
                Err(e) => {
                    let text = text_of(rel, &entry.file_name());
                    items.push(unreadable(text, &entry.path(), &e));
                }
            },
            Err(e) => items.push(Item::Skip(Skipped {
                path: String::new(),
                reason: SkipReason::Unreadable {
                    error: e.to_string(),
                },
            })),
        }
    }
    named.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    items.extend(
        named
            .iter()
            .map(|(name, ft, entry)| item(rel, name, *ft, entry, skip_prefixes)),
    );
    items
}

/// What the walk makes of one named entry of the directory `rel`.
fn item(
    rel: Option<&WorkspacePath>,
    name: &OsStr,
    ft: FileType,
    entry: &DirEntry,
    skip_prefixes: &[WorkspacePath],
) -> Item {
    let skip = |path: String, reason| Item::Skip(Skipped { path, reason });
    if name.as_encoded_bytes().first() == Some(&b'.') {
        return skip(text_of(rel, name), SkipReason::Hidden);
    }
    let Some(path) = name
        .to_str()
        .and_then(|name| WorkspacePath::new(joined(rel, name)).ok())
    else {
        return skip(text_of(rel, name), SkipReason::InvalidName);
    };
    if skip_prefixes.iter().any(|p| path.is_under(p)) {
        return skip(path.as_str().to_owned(), SkipReason::ReadOnly);
    }
    if ft.is_dir() {
        return Item::Dir(path);
    }
    if !ft.is_file() {
        let kind = kind_of(&ft).to_owned();
        return skip(path.as_str().to_owned(), SkipReason::NotRegular { kind });
    }
    match entry.metadata() {
        Ok(md) => {
            let stat = FileStat::of(&md);
            Item::File(Candidate {
                path,
                size: stat.size,
                stat: Some(stat),
            })
        }
        Err(e) => unreadable(path.as_str().to_owned(), &entry.path(), &e),
    }
}

/// An entry (or directory) that could not be read, its error worded as
/// `walkdir` words it: with the path it was reached by.
fn unreadable(path: String, at: &Path, e: &io::Error) -> Item {
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
