//! [`FsBlobStore`]: objects as files under one root directory.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};
use serde::{Deserialize, Serialize};

use crate::{Blob, BlobError, BlobKey, BlobMeta, BlobStore, PutOptions, Result, Sha256Digest};

const BACKEND: &str = "fs";
const OBJECTS: &str = "objects";
const META: &str = "meta";
const TMP: &str = "tmp";

/// A [`BlobStore`] keeping each object as a plain file.
///
/// Layout under the root: `objects/<key>` holds the bytes as-is (readable by
/// an operator), `meta/<key>.json` the content type and digest, `tmp/` the
/// files being written.
///
/// # Guarantees
///
/// - Every path is resolved through a [`cap_std::fs::Dir`] opened on the root,
///   so a symlink planted under the root can never make the store read or
///   write outside it; listing does not follow symlinks at all.
/// - `put` writes a temporary file, `fsync`s it, renames it into place and
///   `fsync`s the directory: readers see the old bytes or the new, never a
///   prefix. Metadata is replaced the same way, after the bytes; a crash
///   between the two leaves stale metadata that `get` detects by digest.
///
/// # Limits
///
/// A key cannot be both an object and a prefix of another object
/// (`a` and `a/b`), because `a` cannot be both a file and a directory; such a
/// `put` fails with `Backend`. Derived korvus keys never do this.
#[derive(Debug, Clone)]
pub struct FsBlobStore {
    root: Arc<Dir>,
    path: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
struct MetaFile {
    content_type: String,
    sha256: String,
    size: u64,
}

impl FsBlobStore {
    /// Opens (creating if missing) a store rooted at `root`.
    ///
    /// # Errors
    /// `Backend` when the directory cannot be created or opened.
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        let path = root.as_ref().to_path_buf();
        std::fs::create_dir_all(&path).map_err(backend)?;
        let dir = Dir::open_ambient_dir(&path, ambient_authority()).map_err(backend)?;
        for sub in [OBJECTS, META, TMP] {
            dir.create_dir_all(sub).map_err(backend)?;
        }
        Ok(Self {
            root: Arc::new(dir),
            path,
        })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.path
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Dir) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let root = Arc::clone(&self.root);
        tokio::task::spawn_blocking(move || f(&root))
            .await
            .map_err(backend)?
    }
}

fn backend(e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> BlobError {
    BlobError::backend(BACKEND, e)
}

fn io_err(key: &BlobKey, e: io::Error) -> BlobError {
    if e.kind() == io::ErrorKind::NotFound {
        BlobError::NotFound {
            key: key.to_string(),
        }
    } else {
        backend(e)
    }
}

fn object_path(key: &BlobKey) -> PathBuf {
    Path::new(OBJECTS).join(key.as_str())
}

fn meta_path(key: &BlobKey) -> PathBuf {
    Path::new(META).join(format!("{}.json", key.as_str()))
}

/// Writes `bytes` to `dest` atomically: temp file, fsync, rename, fsync dir.
fn write_atomic(root: &Dir, dest: &Path, bytes: &[u8]) -> io::Result<()> {
    let parent = dest.parent().unwrap_or(Path::new(""));
    root.create_dir_all(parent)?;
    let tmp = Path::new(TMP).join(uuid::Uuid::now_v7().to_string());
    let result = (|| {
        let mut file = root.open_with(&tmp, OpenOptions::new().write(true).create_new(true))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        root.rename(&tmp, root, dest)?;
        // A directory opened read-only can be fsynced; cap-std's `open_dir`
        // handle cannot (it may be an `O_PATH` descriptor).
        root.open(parent)?.sync_all()
    })();
    if result.is_err() {
        // Best effort: a stray temp file is harmless, but do not leave it.
        let _ = root.remove_file(&tmp);
    }
    result
}

fn read_meta(root: &Dir, key: &BlobKey, size: u64) -> Option<MetaFile> {
    let bytes = root.read(meta_path(key)).ok()?;
    serde_json::from_slice::<MetaFile>(&bytes)
        .ok()
        .filter(|m| m.size == size)
}

fn blob_meta(key: &BlobKey, size: u64, meta: Option<MetaFile>) -> BlobMeta {
    match meta {
        Some(m) => BlobMeta {
            key: key.clone(),
            size,
            content_type: Some(m.content_type),
            sha256: m.sha256.parse().ok(),
        },
        None => BlobMeta {
            key: key.clone(),
            size,
            content_type: None,
            sha256: None,
        },
    }
}

/// Collects every regular file under `dir` (relative key `prefix`), never
/// following symlinks.
fn walk(dir: &Dir, prefix: &str, out: &mut Vec<(String, u64)>) -> io::Result<()> {
    for entry in dir.entries()? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue; // not UTF-8: cannot be a BlobKey segment
        };
        let key = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            walk(&entry.open_dir()?, &key, out)?;
        } else if file_type.is_file() {
            out.push((key, entry.metadata()?.len()));
        }
    }
    Ok(())
}

#[async_trait]
impl BlobStore for FsBlobStore {
    async fn put(&self, key: &BlobKey, bytes: Bytes, options: PutOptions) -> Result<()> {
        if Sha256Digest::of(&bytes) != options.sha256 {
            return Err(BlobError::ChecksumMismatch {
                key: key.to_string(),
            });
        }
        let key = key.clone();
        self.blocking(move |root| {
            write_atomic(root, &object_path(&key), &bytes).map_err(backend)?;
            let meta = MetaFile {
                content_type: options.content_type,
                sha256: options.sha256.to_hex(),
                size: bytes.len() as u64,
            };
            let meta = serde_json::to_vec(&meta).map_err(backend)?;
            write_atomic(root, &meta_path(&key), &meta).map_err(backend)
        })
        .await
    }

    async fn get(&self, key: &BlobKey) -> Result<Blob> {
        let key = key.clone();
        self.blocking(move |root| {
            let mut file = root.open(object_path(&key)).map_err(|e| io_err(&key, e))?;
            if !file.metadata().map_err(backend)?.is_file() {
                return Err(BlobError::NotFound {
                    key: key.to_string(),
                });
            }
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).map_err(backend)?;
            let digest = Sha256Digest::of(&bytes);
            let mut meta = blob_meta(
                &key,
                bytes.len() as u64,
                read_meta(root, &key, bytes.len() as u64),
            );
            if meta.sha256 != Some(digest) {
                // Metadata from an interrupted overwrite: trust the bytes.
                meta.sha256 = Some(digest);
            }
            Ok(Blob {
                bytes: Bytes::from(bytes),
                meta,
            })
        })
        .await
    }

    async fn head(&self, key: &BlobKey) -> Result<BlobMeta> {
        let key = key.clone();
        self.blocking(move |root| {
            let md = root
                .metadata(object_path(&key))
                .map_err(|e| io_err(&key, e))?;
            if !md.is_file() {
                return Err(BlobError::NotFound {
                    key: key.to_string(),
                });
            }
            Ok(blob_meta(&key, md.len(), read_meta(root, &key, md.len())))
        })
        .await
    }

    async fn delete(&self, key: &BlobKey) -> Result<()> {
        let key = key.clone();
        self.blocking(move |root| {
            for path in [object_path(&key), meta_path(&key)] {
                match root.remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(backend(e)),
                }
            }
            Ok(())
        })
        .await
    }

    async fn list<'a>(&self, prefix: Option<&'a BlobKey>) -> Result<Vec<BlobMeta>> {
        let prefix = prefix.cloned();
        self.blocking(move |root| {
            let objects = root.open_dir(OBJECTS).map_err(backend)?;
            let mut found = Vec::new();
            match &prefix {
                None => walk(&objects, "", &mut found).map_err(backend)?,
                Some(p) => match objects.symlink_metadata(p.as_str()) {
                    Ok(md) if md.is_dir() => {
                        let dir = objects.open_dir(p.as_str()).map_err(backend)?;
                        walk(&dir, p.as_str(), &mut found).map_err(backend)?;
                    }
                    Ok(md) if md.is_file() => found.push((p.to_string(), md.len())),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    // A path component that is a file or a symlink: nothing under it.
                    Err(_) => {}
                },
            }
            // Directory order is not key order ("a/b-x" sorts before "a/b/c").
            found.sort();
            let mut out = Vec::with_capacity(found.len());
            for (key, size) in found {
                let Ok(key) = BlobKey::new(key) else { continue };
                let meta = read_meta(root, &key, size);
                out.push(blob_meta(&key, size, meta));
            }
            Ok(out)
        })
        .await
    }
}
