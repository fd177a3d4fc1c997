//! The files of [`FsBlobStore`](crate::FsBlobStore): temporary files
//! committed by rename, the metadata beside each object, the chunked copy
//! of a streamed body, and the flushes (one file, or the file system).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use cap_std::fs::{Dir, OpenOptions};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use crate::fs_list;
use crate::{BlobBody, BlobError, BlobKey, BlobMeta, Durability, PutOptions, Result, Sha256Digest};

const BACKEND: &str = "fs";
/// Where the objects' bytes live under the root.
pub(crate) const OBJECTS: &str = "objects";
/// Where their metadata lives.
pub(crate) const META: &str = "meta";
/// Where files are written before they are renamed into place.
pub(crate) const TMP: &str = "tmp";

/// A backend error of the filesystem store.
pub(crate) fn backend(
    e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
) -> BlobError {
    BlobError::backend(BACKEND, e)
}

#[derive(Debug, Serialize, Deserialize)]
/// What `meta/<key>.json` holds.
pub(crate) struct MetaFile {
    pub(crate) content_type: String,
    pub(crate) sha256: String,
    pub(crate) size: u64,
}

pub(crate) fn object_path(key: &BlobKey) -> PathBuf {
    Path::new(OBJECTS).join(key.as_str())
}

pub(crate) fn meta_path(key: &BlobKey) -> PathBuf {
    Path::new(META).join(format!("{}.json", key.as_str()))
}

/// A fresh temporary path under `tmp/`.
pub(crate) fn tmp_path() -> PathBuf {
    Path::new(TMP).join(uuid::Uuid::now_v7().to_string())
}

/// Creates the temporary file `tmp`.
pub(crate) fn create_tmp(root: &Dir, tmp: &Path) -> io::Result<cap_std::fs::File> {
    root.open_with(tmp, OpenOptions::new().write(true).create_new(true))
}

/// Moves the written temporary file `tmp` to `dest`; with `sync`, the file
/// is fsynced before and the directory after.
pub(crate) fn commit_tmp(root: &Dir, tmp: &Path, dest: &Path, sync: bool) -> io::Result<()> {
    let parent = dest.parent().unwrap_or(Path::new(""));
    let result = (|| {
        if sync {
            root.open(tmp)?.sync_all()?;
        }
        root.create_dir_all(parent)?;
        root.rename(tmp, root, dest)?;
        if sync {
            // A directory opened read-only can be fsynced; cap-std's
            // `open_dir` handle cannot (it may be an `O_PATH` descriptor).
            root.open(parent)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        // Best effort: a stray temp file is harmless, but do not leave it.
        let _ = root.remove_file(tmp);
    }
    result
}

/// Writes `bytes` to `dest` atomically: temp file, (fsync,) rename, (fsync dir).
pub(crate) fn write_atomic(root: &Dir, dest: &Path, bytes: &[u8], sync: bool) -> io::Result<()> {
    let tmp = tmp_path();
    let written = create_tmp(root, &tmp).and_then(|mut file| {
        file.write_all(bytes)?;
        if !sync {
            start_writeback(&file);
        }
        Ok(())
    });
    if let Err(e) = written {
        let _ = root.remove_file(&tmp);
        return Err(e);
    }
    commit_tmp(root, &tmp, dest, sync)
}

/// Writes the metadata file of `key`.
pub(crate) fn write_meta(root: &Dir, key: &BlobKey, options: PutOptions, size: u64) -> Result<()> {
    let sync = options.durability == Durability::OnReturn;
    let meta = MetaFile {
        content_type: options.content_type,
        sha256: options.sha256.to_hex(),
        size,
    };
    let meta = serde_json::to_vec(&meta).map_err(backend)?;
    write_atomic(root, &meta_path(key), &meta, sync).map_err(backend)
}

pub(crate) fn read_meta(root: &Dir, key: &BlobKey, size: u64) -> Option<MetaFile> {
    let bytes = root.read(meta_path(key)).ok()?;
    serde_json::from_slice::<MetaFile>(&bytes)
        .ok()
        .filter(|m| m.size == size)
}

pub(crate) fn blob_meta(
    key: &BlobKey,
    size: u64,
    last_modified: Option<SystemTime>,
    meta: Option<MetaFile>,
) -> BlobMeta {
    let (content_type, sha256) = match meta {
        Some(m) => (Some(m.content_type), m.sha256.parse().ok()),
        None => (None, None),
    };
    BlobMeta {
        key: key.clone(),
        size,
        content_type,
        sha256,
        last_modified,
    }
}

/// The metadata of listed files, in their order.
pub(crate) fn metas(root: &Dir, found: Vec<fs_list::Found>) -> Vec<BlobMeta> {
    let mut out = Vec::with_capacity(found.len());
    for (key, size, mtime) in found {
        let Ok(key) = BlobKey::new(key) else { continue };
        let meta = read_meta(root, &key, size);
        out.push(blob_meta(&key, size, mtime, meta));
    }
    out
}

/// Size of the chunks `put_stream` copies.
const CHUNK: usize = 1024 * 1024;

/// Copies `body` into the temporary `file`, returning the digest of what
/// was read and its size.
pub(crate) async fn copy_body(
    key: &BlobKey,
    mut body: BlobBody,
    file: cap_std::fs::File,
) -> Result<(Sha256Digest, u64)> {
    let mut file = tokio::fs::File::from_std(file.into_std());
    let size = body.len();
    while let Some(chunk) = body.next_chunk(key, CHUNK).await? {
        file.write_all(&chunk).await.map_err(backend)?;
    }
    file.flush().await.map_err(backend)?;
    let digest = body.finish(key).await?;
    Ok((digest, size))
}

/// Starts writing a deferred put's bytes back to disk without waiting
/// for it (`posix_fadvise(POSIX_FADV_DONTNEED)`, which on Linux starts
/// writeback of the dirty range and keeps pages still being written), so
/// the barrier's flush overlaps the rest of the batch instead of
/// following it. Advice only: a failure changes nothing.
pub(crate) fn start_writeback(file: &impl std::os::fd::AsFd) {
    #[cfg(target_os = "linux")]
    let _ = rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed);
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

/// Flushes the file system holding `root`.
#[cfg(target_os = "linux")]
pub(crate) fn flush_fs(root: &Dir) -> io::Result<()> {
    // `root` may be an `O_PATH` descriptor, which `syncfs` refuses.
    Ok(rustix::fs::syncfs(root.open(OBJECTS)?)?)
}

/// Flushes every file system (no per-file-system call here).
#[cfg(not(target_os = "linux"))]
pub(crate) fn flush_fs(_root: &Dir) -> io::Result<()> {
    rustix::fs::sync();
    Ok(())
}
