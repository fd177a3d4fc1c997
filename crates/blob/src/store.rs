//! The [`BlobStore`] seam and the values it moves.

use std::fmt::{self, Debug};
use std::pin::Pin;
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;

use tokio::io::AsyncRead;

use crate::{BlobBody, BlobError, BlobKey, Result, Sha256Digest};

/// When the bytes of a put must be durable (survive a crash of the host).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Durable when the put returns (the default).
    #[default]
    OnReturn,
    /// Durable once a later [`BlobStore::barrier`] returns `Ok`. Visible to
    /// readers when the put returns either way. A batch of puts then costs
    /// one barrier instead of one per object; backends whose puts are
    /// always durable on return treat it as [`OnReturn`](Self::OnReturn).
    AtBarrier,
}

/// What [`BlobStore::put`] stores next to the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PutOptions {
    /// MIME type.
    pub content_type: String,
    /// Digest of the bytes. The store verifies it (S3: the server does) and
    /// refuses a mismatch with [`BlobError::ChecksumMismatch`](crate::BlobError::ChecksumMismatch).
    pub sha256: Sha256Digest,
    /// When the bytes must be durable.
    pub durability: Durability,
}

impl PutOptions {
    /// Options with the given content type and digest, durable on return.
    pub fn new(content_type: impl Into<String>, sha256: Sha256Digest) -> Self {
        Self {
            content_type: content_type.into(),
            sha256,
            durability: Durability::OnReturn,
        }
    }

    /// Options for `bytes` with the given content type, computing the digest.
    pub fn for_bytes(content_type: impl Into<String>, bytes: &[u8]) -> Self {
        Self::new(content_type, Sha256Digest::of(bytes))
    }

    /// The same options with the given durability.
    #[must_use]
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }
}

/// What [`BlobStore::put_file`] stores next to
/// the bytes. There is no digest to give: the store computes it while it
/// stores the bytes and returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PutFileOptions {
    /// MIME type.
    pub content_type: String,
    /// When the bytes must be durable.
    pub durability: Durability,
}

impl PutFileOptions {
    /// Options with the given content type, durable on return.
    pub fn new(content_type: impl Into<String>) -> Self {
        Self {
            content_type: content_type.into(),
            durability: Durability::OnReturn,
        }
    }

    /// The same options with the given durability.
    #[must_use]
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }
}

/// What a store knows about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobMeta {
    /// The key.
    pub key: BlobKey,
    /// Size in bytes.
    pub size: u64,
    /// MIME type as stored; may be `None` in listings of backends that do not
    /// return it there.
    pub content_type: Option<String>,
    /// Digest as stored; may be `None` in listings.
    pub sha256: Option<Sha256Digest>,
    /// When the object was last written, by the backend's clock (S3: the
    /// server's). Every backend here reports it, in listings too; `None`
    /// only from backends that cannot tell.
    pub last_modified: Option<SystemTime>,
}

/// An object: bytes and what is known about them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// The bytes.
    pub bytes: Bytes,
    /// Metadata.
    pub meta: BlobMeta,
}

/// An object read as a stream: what is known about it, and a reader of
/// its bytes that holds at most a buffer of them at a time.
///
/// `meta.sha256` is the digest as stored; unlike [`BlobStore::get`], a
/// streamed read does not recompute it (that would need the whole object).
pub struct BlobReader {
    /// Metadata; `size` is the number of bytes the reader yields.
    pub meta: BlobMeta,
    /// The bytes.
    pub body: Pin<Box<dyn AsyncRead + Send>>,
}

impl Debug for BlobReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobReader")
            .field("meta", &self.meta)
            .finish_non_exhaustive()
    }
}

/// Storage for the bytes of reports, artifacts and archives.
///
/// Keys are [`BlobKey`]s, validated before any I/O. Every backend gives:
///
/// - `put` is atomic: a reader sees the old object or the new one, never a
///   mix or a prefix. Overwriting is allowed (report keys are deterministic so
///   a retry overwrites).
/// - `delete` of a missing key is `Ok` (idempotent).
/// - `list(prefix)` matches whole segments (`a/b` lists `a/b/c`, never
///   `a/bc`), is complete, and is sorted by key.
/// - `put_stream` stores a body of any size without holding it in memory
///   (every backend here; the default implementation buffers) and stores
///   nothing when the body does not match its length or digest or fails
///   half-way.
///
/// # Cancel safety
/// Reads and listings change nothing. A dropped `put`, `put_stream` or
/// `put_file` has stored the whole object or nothing (readers keep seeing
/// the old one), and may leave backend leftovers no reader sees (an
/// `FsBlobStore` temporary file, an S3 incomplete multipart upload). A dropped
/// `delete` happened or not; a dropped `delete_many` may have removed some
/// keys; a dropped `barrier` made nothing durable the caller can count on:
/// call it again. Implementations must never make part of an object visible.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait BlobStore: Send + Sync + Debug + 'static {
    /// Stores `bytes` at `key`, replacing any object there.
    ///
    /// # Errors
    /// [`BlobError::ChecksumMismatch`](crate::BlobError::ChecksumMismatch) when
    /// `options.sha256` is not the digest of `bytes`; `Backend` on I/O failure.
    ///
    /// # Cancel safety
    /// Not cancel-safe: a dropped put may or may not have stored the object
    /// (never a part of it).
    async fn put(&self, key: &BlobKey, bytes: Bytes, options: PutOptions) -> Result<()>;

    /// Stores a streamed body at `key`, replacing any object there. The
    /// body is hashed while it is read and checked against
    /// `options.sha256` before the object becomes visible; on any failure
    /// (mismatch, a reader error, a backend error) nothing is stored.
    ///
    /// The default implementation reads the body into memory and calls
    /// [`put`](Self::put); backends override it to stream.
    ///
    /// # Errors
    /// [`BlobError::ChecksumMismatch`](crate::BlobError::ChecksumMismatch)
    /// when the bytes read are not `body.len()` bytes with digest
    /// `options.sha256`; [`BlobError::Body`](crate::BlobError::Body) when
    /// the reader fails; `Backend` on I/O failure.
    ///
    /// # Cancel safety
    /// As [`put`](Self::put).
    async fn put_stream(&self, key: &BlobKey, body: BlobBody, options: PutOptions) -> Result<()> {
        let (bytes, digest) = body.into_bytes(key).await?;
        if digest != options.sha256 {
            return Err(crate::BlobError::ChecksumMismatch {
                key: key.to_string(),
            });
        }
        self.put(key, bytes, options).await
    }

    /// Stores the `len` bytes of an open file, read from its current
    /// position, at `key`, and returns their SHA-256, computed while they
    /// were stored: a caller that has not hashed the file need not (the
    /// harvest's usual path reads each byte once). A file that does not
    /// hold exactly `len` bytes from there (it shrank or grew since its
    /// length was taken) stores nothing.
    ///
    /// The default implementation hashes the file on a blocking thread,
    /// goes back to where it started, and calls
    /// [`put_stream`](Self::put_stream), which hashes again and so refuses
    /// a file that changed in between: two reads. Backends override it to
    /// read once (`FsBlobStore` copies and hashes in one pass on a
    /// blocking thread).
    ///
    /// # Errors
    /// [`BlobError::ChecksumMismatch`](crate::BlobError::ChecksumMismatch)
    /// when the file does not hold `len` bytes or changed while it was
    /// read; [`BlobError::Body`](crate::BlobError::Body) when reading it
    /// fails; `Backend` on I/O failure of the store.
    ///
    /// # Cancel safety
    /// As [`put`](Self::put).
    async fn put_file(
        &self,
        key: &BlobKey,
        file: std::fs::File,
        len: u64,
        options: PutFileOptions,
    ) -> Result<Sha256Digest> {
        let (file, digest) = hash_then_rewind(key, file, len).await?;
        let body = BlobBody::new(tokio::fs::File::from_std(file), len);
        let put = PutOptions::new(options.content_type, digest).durability(options.durability);
        self.put_stream(key, body, put).await?;
        Ok(digest)
    }

    /// Makes every put with [`Durability::AtBarrier`] that returned before
    /// this call durable. The default does nothing: right for backends
    /// whose puts are durable on return.
    ///
    /// # Errors
    /// `Backend` when the flush fails: the deferred puts may then be lost
    /// in a crash, so no row may point at them yet.
    async fn barrier(&self) -> Result<()> {
        Ok(())
    }

    /// Reads an object.
    ///
    /// # Errors
    /// [`BlobError::NotFound`](crate::BlobError::NotFound); `Backend`.
    async fn get(&self, key: &BlobKey) -> Result<Blob>;

    /// Reads an object as a stream, e.g. to send a large artifact over
    /// HTTP without holding it in memory. A reader sees one version of the
    /// object whole, even if it is overwritten while being read.
    ///
    /// The default implementation reads the object with
    /// [`get`](Self::get) and streams it from memory; backends override it
    /// to stream.
    ///
    /// # Errors
    /// [`BlobError::NotFound`](crate::BlobError::NotFound); `Backend`.
    /// A failure after the object was found surfaces as an I/O error of
    /// the reader.
    ///
    /// # Cancel safety
    /// Cancel-safe: nothing changes.
    async fn get_stream(&self, key: &BlobKey) -> Result<BlobReader> {
        let blob = self.get(key).await?;
        Ok(BlobReader {
            meta: blob.meta,
            body: Box::pin(std::io::Cursor::new(blob.bytes)),
        })
    }

    /// Reads an object's metadata without its bytes.
    ///
    /// # Errors
    /// [`BlobError::NotFound`](crate::BlobError::NotFound); `Backend`.
    async fn head(&self, key: &BlobKey) -> Result<BlobMeta>;

    /// Removes an object; `Ok` when it does not exist.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn delete(&self, key: &BlobKey) -> Result<()>;

    /// Lists the objects at or under `prefix` (everything when `None`), sorted by key.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn list<'a>(&self, prefix: Option<&'a BlobKey>) -> Result<Vec<BlobMeta>>;

    /// One page of [`list`](Self::list): at most `limit` objects at or
    /// under `prefix` whose keys sort after `after` (from the first when
    /// `None`), sorted by key. A page shorter than `limit` is the last;
    /// a walk passes each page's last key as the next `after`. Memory is
    /// bounded by the page: the backends here never read the whole
    /// listing for one (the filesystem holds, at each directory level on
    /// the way to the cursor, at most `limit` names).
    ///
    /// A walk sees every object that exists from its start to its end
    /// exactly once; one written or deleted while it runs may or may not
    /// be seen (a key that sorts before the cursor is not).
    ///
    /// The default implementation filters [`list`](Self::list), holding
    /// the whole listing; backends override it.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    ///
    /// # Cancel safety
    /// Cancel-safe: nothing changes.
    async fn list_page<'a>(
        &self,
        prefix: Option<&'a BlobKey>,
        after: Option<&'a BlobKey>,
        limit: usize,
    ) -> Result<Vec<BlobMeta>> {
        let mut listed = self.list(prefix).await?;
        listed.retain(|m| after.is_none_or(|a| m.key > *a));
        listed.truncate(limit);
        Ok(listed)
    }

    /// Removes every key of `keys` (a missing key counts as removed) and
    /// returns those it could not, each with its cause: empty when every
    /// key is gone. Backends that remove many keys per request do (S3:
    /// `DeleteObjects`, 1,000 keys a request); the default deletes one
    /// key per call, [`DELETE_MANY_CONCURRENCY`] calls at a time.
    ///
    /// # Cancel safety
    /// A dropped call may have removed some keys and not others.
    async fn delete_many(&self, keys: &[BlobKey]) -> Vec<(BlobKey, BlobError)> {
        let mut failed = Vec::new();
        for chunk in keys.chunks(DELETE_MANY_CONCURRENCY) {
            let results = futures::future::join_all(chunk.iter().map(|k| self.delete(k))).await;
            for (key, result) in chunk.iter().zip(results) {
                if let Err(e) = result {
                    failed.push((key.clone(), e));
                }
            }
        }
        failed
    }
}

/// Hashes the `len` bytes of `file` from its current position on a
/// blocking thread and moves it back there: the first read of the default
/// [`BlobStore::put_file`], public for backends that override it.
///
/// # Errors
/// [`BlobError::ChecksumMismatch`](crate::BlobError::ChecksumMismatch)
/// when the file does not hold exactly `len` bytes from there;
/// [`BlobError::Body`](crate::BlobError::Body) when reading fails.
///
/// # Cancel safety
/// Dropping it loses `file` (closed once the blocking hash, which runs to
/// its end, finishes); nothing is written.
pub async fn hash_then_rewind(
    key: &BlobKey,
    mut file: std::fs::File,
    len: u64,
) -> Result<(std::fs::File, Sha256Digest)> {
    use std::io::{Seek, SeekFrom};
    let hashed = tokio::task::spawn_blocking(move || {
        let start = file.stream_position()?;
        let digest = crate::digest_of_file(&mut file, len)?;
        file.seek(SeekFrom::Start(start))?;
        Ok::<_, std::io::Error>((file, digest))
    })
    .await
    .map_err(|e| crate::BlobError::backend("blob", e))?;
    match hashed {
        Ok((file, Some(digest))) => Ok((file, digest)),
        Ok((_, None)) => Err(crate::BlobError::ChecksumMismatch {
            key: key.to_string(),
        }),
        Err(source) => Err(crate::BlobError::Body {
            key: key.to_string(),
            source,
        }),
    }
}

/// Deletes in flight at once in the default
/// [`BlobStore::delete_many`].
pub const DELETE_MANY_CONCURRENCY: usize = 16;
