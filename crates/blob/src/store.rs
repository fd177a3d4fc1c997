//! The [`BlobStore`] seam and the values it moves.

use std::fmt::{self, Debug};
use std::str::FromStr;

use async_trait::async_trait;
use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::{BlobKey, Result};

/// A SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha256Digest([u8; 32]);

impl Sha256Digest {
    /// Digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// Wraps raw digest bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The raw digest bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lower-case hex, as stored in artifact rows.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256Digest({})", self.to_hex())
    }
}

/// A string that is not 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a SHA-256 hex digest")]
pub struct ParseDigestError;

impl FromStr for Sha256Digest {
    type Err = ParseDigestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).map_err(|_| ParseDigestError)?;
        Ok(Self(out))
    }
}

/// What [`BlobStore::put`] stores next to the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutOptions {
    /// MIME type.
    pub content_type: String,
    /// Digest of the bytes. The store verifies it (S3: the server does) and
    /// refuses a mismatch with [`BlobError::ChecksumMismatch`](crate::BlobError::ChecksumMismatch).
    pub sha256: Sha256Digest,
}

impl PutOptions {
    /// Options for `bytes` with the given content type, computing the digest.
    pub fn for_bytes(content_type: impl Into<String>, bytes: &[u8]) -> Self {
        Self {
            content_type: content_type.into(),
            sha256: Sha256Digest::of(bytes),
        }
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
}

/// An object: bytes and what is known about them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// The bytes.
    pub bytes: Bytes,
    /// Metadata.
    pub meta: BlobMeta,
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

    /// Reads an object.
    ///
    /// # Errors
    /// [`BlobError::NotFound`](crate::BlobError::NotFound); `Backend`.
    async fn get(&self, key: &BlobKey) -> Result<Blob>;

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
}
