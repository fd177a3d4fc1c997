//! [`FsBlobStore`]: objects as files under one root directory.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use cap_std::ambient_authority;
use cap_std::fs::Dir;

use crate::file::{copy_hashing, CopyError};
use crate::fs_list::{self, modified};
use crate::fs_write::{
    backend, blob_meta, commit_tmp, copy_body, create_tmp, flush_fs, meta_path, metas, object_path,
    read_meta, start_writeback, tmp_path, write_atomic, write_meta, META, OBJECTS, TMP,
};
use crate::{
    Blob, BlobBody, BlobError, BlobKey, BlobMeta, BlobReader, BlobStore, Durability,
    PutFileOptions, PutOptions, Result, Sha256Digest,
};

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
/// - A put with [`Durability::AtBarrier`] writes and renames the same way
///   but skips the `fsync`s; [`barrier`](BlobStore::barrier) then flushes
///   the file system holding the root once (`syncfs(2)` on Linux, `sync(2)`
///   elsewhere), so a batch of N objects costs one flush instead of 2N+2N
///   `fsync`s. A crash before the barrier returns may lose such an object
///   or leave it short; after it returns, every one of them is on disk with
///   its metadata. The harvest writes rows only after the barrier.
/// - `put_stream` copies the body into the temporary file in 1 MiB chunks:
///   memory stays bounded whatever the object's size.
/// - `put_file` copies an open file through a 256 KiB buffer on a blocking
///   thread, hashing each chunk on the way: every byte is read once and no
///   runtime worker hashes. A deferred put (this one or `put`) starts its
///   writeback before it returns, so the barrier's flush overlaps the rest
///   of the batch.
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
    flush: Arc<Flush>,
}

/// Bookkeeping of deferred puts: how many returned, and how many of those
/// the last successful barrier covered (held across the flush, so a
/// barrier never returns while an earlier one is still flushing its puts).
#[derive(Debug, Default)]
struct Flush {
    deferred: AtomicU64,
    flushed: tokio::sync::Mutex<u64>,
}

impl FsBlobStore {
    /// Opens (creating if missing, 0700) a store rooted at `root`.
    ///
    /// # Errors
    /// `Backend` when the directory cannot be created or opened.
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        let path = root.as_ref().to_path_buf();
        // Made private (0700, whatever the umask) when missing: no other
        // local user reads an artifact. An existing directory keeps its
        // mode.
        if !path.exists() {
            std::os::unix::fs::DirBuilderExt::mode(
                std::fs::DirBuilder::new().recursive(true),
                0o700,
            )
            .create(&path)
            .map_err(backend)?;
        }
        let dir = Dir::open_ambient_dir(&path, ambient_authority()).map_err(backend)?;
        for sub in [OBJECTS, META, TMP] {
            dir.create_dir_all(sub).map_err(backend)?;
        }
        Ok(Self {
            root: Arc::new(dir),
            path,
            flush: Arc::default(),
        })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.path
    }

    /// Counts a deferred put that has returned, for [`BlobStore::barrier`].
    fn deferred_done(&self, deferred: bool) {
        if deferred {
            self.flush.deferred.fetch_add(1, Ordering::AcqRel);
        }
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

fn io_err(key: &BlobKey, e: io::Error) -> BlobError {
    if e.kind() == io::ErrorKind::NotFound {
        BlobError::NotFound {
            key: key.to_string(),
        }
    } else {
        backend(e)
    }
}

#[async_trait]
impl BlobStore for FsBlobStore {
    async fn put(&self, key: &BlobKey, bytes: Bytes, options: PutOptions) -> Result<()> {
        let key = key.clone();
        let deferred = options.durability == Durability::AtBarrier;
        // The check hashes every byte: on the blocking thread, not a
        // runtime worker.
        self.blocking(move |root| {
            if Sha256Digest::of(&bytes) != options.sha256 {
                return Err(BlobError::ChecksumMismatch {
                    key: key.to_string(),
                });
            }
            write_atomic(root, &object_path(&key), &bytes, !deferred).map_err(backend)?;
            write_meta(root, &key, options, bytes.len() as u64)
        })
        .await?;
        self.deferred_done(deferred);
        Ok(())
    }

    async fn put_stream(&self, key: &BlobKey, body: BlobBody, options: PutOptions) -> Result<()> {
        let tmp = tmp_path();
        let file = {
            let tmp = tmp.clone();
            self.blocking(move |root| create_tmp(root, &tmp).map_err(backend))
                .await?
        };
        let copied = copy_body(key, body, file).await;
        let size = match copied {
            Ok((digest, size)) if digest == options.sha256 => size,
            other => {
                let tmp = tmp.clone();
                let _ = self
                    .blocking(move |root| root.remove_file(&tmp).map_err(backend))
                    .await;
                return match other {
                    Ok(_) => Err(BlobError::ChecksumMismatch {
                        key: key.to_string(),
                    }),
                    Err(e) => Err(e),
                };
            }
        };
        let deferred = options.durability == Durability::AtBarrier;
        let key = key.clone();
        self.blocking(move |root| {
            commit_tmp(root, &tmp, &object_path(&key), !deferred).map_err(backend)?;
            write_meta(root, &key, options, size)
        })
        .await?;
        self.deferred_done(deferred);
        Ok(())
    }

    /// Copies the file into a temporary file on a blocking thread,
    /// hashing each chunk as it passes (one read of every byte, off the
    /// runtime), then renames it into place as [`put`](BlobStore::put)
    /// does. With [`Durability::AtBarrier`] the copy's writeback is started
    /// at once (`posix_fadvise`), so the barrier finds little left to
    /// flush.
    async fn put_file(
        &self,
        key: &BlobKey,
        mut file: std::fs::File,
        len: u64,
        options: PutFileOptions,
    ) -> Result<Sha256Digest> {
        let key = key.clone();
        let deferred = options.durability == Durability::AtBarrier;
        let digest = self
            .blocking(move |root| {
                let tmp = tmp_path();
                let mut out = create_tmp(root, &tmp).map_err(backend)?;
                let copied = copy_hashing(&mut file, &mut out, len);
                let digest = match copied {
                    Ok(Some(digest)) => digest,
                    failed => {
                        drop(out);
                        let _ = root.remove_file(&tmp);
                        return Err(match failed {
                            Ok(_) => BlobError::ChecksumMismatch {
                                key: key.to_string(),
                            },
                            Err(CopyError::Read(source)) => BlobError::Body {
                                key: key.to_string(),
                                source,
                            },
                            Err(CopyError::Write(e)) => backend(e),
                        });
                    }
                };
                if deferred {
                    start_writeback(&out);
                }
                drop(out);
                commit_tmp(root, &tmp, &object_path(&key), !deferred).map_err(backend)?;
                let options =
                    PutOptions::new(options.content_type, digest).durability(options.durability);
                write_meta(root, &key, options, len)?;
                Ok(digest)
            })
            .await?;
        self.deferred_done(deferred);
        Ok(digest)
    }

    async fn barrier(&self) -> Result<()> {
        let mut flushed = self.flush.flushed.lock().await;
        let target = self.flush.deferred.load(Ordering::Acquire);
        if *flushed >= target {
            return Ok(());
        }
        self.blocking(|root| flush_fs(root).map_err(backend))
            .await?;
        *flushed = target;
        Ok(())
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
            let md = file.metadata().map_err(backend)?;
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).map_err(backend)?;
            let digest = Sha256Digest::of(&bytes);
            let mut meta = blob_meta(
                &key,
                bytes.len() as u64,
                modified(&md),
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

    async fn get_stream(&self, key: &BlobKey) -> Result<BlobReader> {
        let key = key.clone();
        let (file, meta) = self
            .blocking(move |root| {
                // The open file keeps the version it opened: a later
                // overwrite renames a new file over the name.
                let file = root.open(object_path(&key)).map_err(|e| io_err(&key, e))?;
                let md = file.metadata().map_err(backend)?;
                if !md.is_file() {
                    return Err(BlobError::NotFound {
                        key: key.to_string(),
                    });
                }
                let meta = blob_meta(
                    &key,
                    md.len(),
                    modified(&md),
                    read_meta(root, &key, md.len()),
                );
                Ok((file.into_std(), meta))
            })
            .await?;
        Ok(BlobReader {
            meta,
            body: Box::pin(tokio::fs::File::from_std(file)),
        })
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
            let meta = read_meta(root, &key, md.len());
            Ok(blob_meta(&key, md.len(), modified(&md), meta))
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

    async fn delete_many(&self, keys: &[BlobKey]) -> Vec<(BlobKey, BlobError)> {
        // One blocking task for the batch, not one per key.
        let keys = keys.to_vec();
        let failed = keys.clone();
        let removed = self
            .blocking(move |root| {
                let mut failed = Vec::new();
                for key in keys {
                    for path in [object_path(&key), meta_path(&key)] {
                        match root.remove_file(&path) {
                            Ok(()) => {}
                            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                            Err(e) => {
                                failed.push((key, backend(e)));
                                break;
                            }
                        }
                    }
                }
                Ok(failed)
            })
            .await;
        removed.unwrap_or_else(|e| {
            let cause = e.to_string();
            failed
                .into_iter()
                .map(|k| (k, backend(cause.clone())))
                .collect()
        })
    }

    async fn list<'a>(&self, prefix: Option<&'a BlobKey>) -> Result<Vec<BlobMeta>> {
        let prefix = prefix.cloned();
        self.blocking(move |root| {
            let objects = root.open_dir(OBJECTS).map_err(backend)?;
            let found = fs_list::all(&objects, prefix.as_ref()).map_err(backend)?;
            Ok(metas(root, found))
        })
        .await
    }

    async fn list_page<'a>(
        &self,
        prefix: Option<&'a BlobKey>,
        after: Option<&'a BlobKey>,
        limit: usize,
    ) -> Result<Vec<BlobMeta>> {
        let prefix = prefix.cloned();
        let after = after.map(ToString::to_string);
        self.blocking(move |root| {
            let objects = root.open_dir(OBJECTS).map_err(backend)?;
            let found = fs_list::page(&objects, prefix.as_ref(), after.as_deref(), limit)
                .map_err(backend)?;
            Ok(metas(root, found))
        })
        .await
    }
}
