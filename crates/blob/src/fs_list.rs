//! Listing [`FsBlobStore`](crate::FsBlobStore)'s `objects/` tree: whole
//! (`list`) or one page at a time in key order (`list_page`), never
//! following symlinks.
//!
//! Directory order is not key order, and neither is sorting names within
//! a directory: `a/b-x` sorts before `a/b/c` because `-` sorts before `/`.
//! A directory `d` is therefore ordered as `d/`, which puts the whole
//! subtree where its keys sort; a depth-first walk in that order yields
//! keys in key order, so a page can stop after `limit` files and the next
//! page can skip every subtree that lies wholly before its cursor.

use std::io;
use std::time::SystemTime;

use cap_std::fs::Dir;

use crate::BlobKey;

/// A listed file: key, size, modification time.
pub(crate) type Found = (String, u64, Option<SystemTime>);

pub(crate) fn modified(md: &cap_std::fs::Metadata) -> Option<SystemTime> {
    md.modified().ok().map(cap_std::time::SystemTime::into_std)
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}/{name}")
    }
}

/// Every regular file at or under `prefix` (everything when `None`) in
/// `objects`, sorted by key.
pub(crate) fn all(objects: &Dir, prefix: Option<&BlobKey>) -> io::Result<Vec<Found>> {
    let mut found = Vec::new();
    match prefix {
        None => walk(objects, "", &mut found)?,
        Some(p) => match start(objects, p)? {
            Start::Dir(dir) => walk(&dir, p.as_str(), &mut found)?,
            Start::File(f) => found.push(f),
            Start::Nothing => {}
        },
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}

/// At most `limit` regular files at or under `prefix` whose keys sort
/// after `after`, in key order.
pub(crate) fn page(
    objects: &Dir,
    prefix: Option<&BlobKey>,
    after: Option<&str>,
    limit: usize,
) -> io::Result<Vec<Found>> {
    let mut found = Vec::new();
    if limit == 0 {
        return Ok(found);
    }
    match prefix {
        None => walk_page(objects, "", after, limit, &mut found)?,
        Some(p) => match start(objects, p)? {
            Start::Dir(dir) => walk_page(&dir, p.as_str(), after, limit, &mut found)?,
            Start::File(f) if after.is_none_or(|a| f.0.as_str() > a) => found.push(f),
            Start::File(_) | Start::Nothing => {}
        },
    }
    Ok(found)
}

/// What a prefix names.
enum Start {
    Dir(Dir),
    File(Found),
    Nothing,
}

fn start(objects: &Dir, p: &BlobKey) -> io::Result<Start> {
    Ok(match objects.symlink_metadata(p.as_str()) {
        Ok(md) if md.is_dir() => Start::Dir(objects.open_dir(p.as_str())?),
        Ok(md) if md.is_file() => Start::File((p.to_string(), md.len(), modified(&md))),
        // A symlink, a vanished path, or a path component that is a file
        // or a symlink: nothing under it.
        Ok(_) | Err(_) => Start::Nothing,
    })
}

/// Collects every regular file under `dir` (relative key `prefix`).
fn walk(dir: &Dir, prefix: &str, out: &mut Vec<Found>) -> io::Result<()> {
    for entry in dir.entries()? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue; // not UTF-8: cannot be a BlobKey segment
        };
        let key = join(prefix, &name);
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            walk(&entry.open_dir()?, &key, out)?;
        } else if file_type.is_file() {
            let md = entry.metadata()?;
            out.push((key, md.len(), modified(&md)));
        }
    }
    Ok(())
}

/// Depth-first in key order under `dir` (relative key `prefix`), adding
/// files after `after` to `out` until it holds `limit`. Holds this
/// directory's names after the cursor while it runs.
fn walk_page(
    dir: &Dir,
    prefix: &str,
    after: Option<&str>,
    limit: usize,
    out: &mut Vec<Found>,
) -> io::Result<()> {
    // (sort key, name, is a directory)
    let mut entries: Vec<(String, String, bool)> = Vec::new();
    for entry in dir.entries()? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let file_type = entry.file_type()?;
        let is_dir = file_type.is_dir();
        if !is_dir && !file_type.is_file() {
            continue;
        }
        let mut sort = join(prefix, &name);
        if is_dir {
            sort.push('/');
        }
        let wanted = match after {
            None => true,
            // Some key of the subtree (all start with `sort`) sorts after
            // the cursor unless the cursor sorts after all of them.
            Some(a) if is_dir => a < sort.as_str() || a.starts_with(sort.as_str()),
            Some(a) => sort.as_str() > a,
        };
        if wanted {
            entries.push((sort, name, is_dir));
        }
    }
    entries.sort_unstable();
    for (sort, name, is_dir) in entries {
        if out.len() >= limit {
            break;
        }
        if is_dir {
            match dir.open_dir(&name) {
                Ok(sub) => walk_page(&sub, &sort[..sort.len() - 1], after, limit, out)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        } else {
            match dir.symlink_metadata(&name) {
                Ok(md) if md.is_file() => out.push((sort, md.len(), modified(&md))),
                Ok(_) => {}
                // Deleted since it was read: not listed.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}
