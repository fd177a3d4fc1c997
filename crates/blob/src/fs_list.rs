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

use std::collections::BinaryHeap;
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
/// files after `after` to `out` until it holds `limit`. Holds at most the
/// `limit` smallest names of this directory after the cursor at a time
/// (a directory of a million names is read again for each batch rather
/// than held).
fn walk_page(
    dir: &Dir,
    prefix: &str,
    after: Option<&str>,
    limit: usize,
    out: &mut Vec<Found>,
) -> io::Result<()> {
    // Within this directory, entries after `from` (a sort key) are next.
    let mut from: Option<String> = None;
    loop {
        let need = limit - out.len();
        let batch = smallest(dir, prefix, after, from.as_deref(), need)?;
        let full = batch.len() == need;
        for (sort, name, is_dir) in batch {
            if out.len() >= limit {
                return Ok(());
            }
            if is_dir {
                match dir.open_dir(&name) {
                    Ok(sub) => walk_page(&sub, &sort[..sort.len() - 1], after, limit, out)?,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            } else {
                match dir.symlink_metadata(&name) {
                    Ok(md) if md.is_file() => out.push((sort.clone(), md.len(), modified(&md))),
                    Ok(_) => {}
                    // Deleted since it was read: not listed.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
            from = Some(sort);
        }
        // A batch short of what was needed held every entry left.
        if !full || out.len() >= limit {
            return Ok(());
        }
    }
}

/// The `n` smallest entries of `dir` (as sort key, name, is a directory)
/// that can hold keys after the cursor `after` and sort after `from`,
/// in order: a bounded max-heap over one pass of the directory. Names
/// that cannot be a key segment are left out here, so a page is short
/// only at the end of the listing.
fn smallest(
    dir: &Dir,
    prefix: &str,
    after: Option<&str>,
    from: Option<&str>,
    n: usize,
) -> io::Result<Vec<(String, String, bool)>> {
    let mut heap: BinaryHeap<(String, String, bool)> = BinaryHeap::with_capacity(n + 1);
    if n == 0 {
        return Ok(Vec::new());
    }
    for entry in dir.entries()? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue; // not UTF-8: cannot be a BlobKey segment
        };
        let file_type = entry.file_type()?;
        let is_dir = file_type.is_dir();
        if !is_dir && !file_type.is_file() {
            continue;
        }
        let mut sort = join(prefix, &name);
        if !is_dir && BlobKey::new(sort.as_str()).is_err() {
            continue;
        }
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
        if !wanted || from.is_some_and(|f| sort.as_str() <= f) {
            continue;
        }
        if heap.len() < n {
            heap.push((sort, name, is_dir));
        } else if heap.peek().is_some_and(|top| sort < top.0) {
            heap.pop();
            heap.push((sort, name, is_dir));
        }
    }
    Ok(heap.into_sorted_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;

    /// A flat directory larger than a page, empty and nested directories
    /// among its names, and names that cannot be keys: every page but the
    /// last is full, and the walk lists what a whole listing lists.
    #[test]
    fn a_big_directory_is_walked_a_page_at_a_time_in_key_order() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("d");
        std::fs::create_dir_all(root.join("m-empty")).unwrap();
        std::fs::create_dir_all(root.join("m/deep")).unwrap();
        for i in 0..2345 {
            std::fs::write(root.join(format!("f{i:05}")), b"").unwrap();
        }
        std::fs::write(root.join("m/deep/x"), b"").unwrap();
        std::fs::write(root.join("m.txt"), b"").unwrap();
        std::fs::write(root.join("bad\\name"), b"").unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap();
        let whole: Vec<String> = all(&dir, None)
            .unwrap()
            .into_iter()
            .map(|f| f.0)
            .filter(|k| BlobKey::new(k.as_str()).is_ok())
            .collect();
        assert_eq!(whole.len(), 2345 + 2);
        for limit in [50, 1000, 5000] {
            let mut walked: Vec<String> = Vec::new();
            loop {
                let p = page(&dir, None, walked.last().map(String::as_str), limit).unwrap();
                let n = p.len();
                walked.extend(p.into_iter().map(|f| f.0));
                if n < limit {
                    break;
                }
            }
            assert_eq!(walked, whole, "limit {limit}");
        }
    }
}
