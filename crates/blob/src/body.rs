//! [`BlobBody`]: the bytes of a streamed put, read in chunks and hashed on
//! the way, so no backend ever holds a whole object in memory.

use std::fmt;
use std::io;
use std::path::Path;

use bytes::{Bytes, BytesMut};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::{BlobError, BlobKey, Result, Sha256Digest};

/// The body of a [`BlobStore::put_stream`](crate::BlobStore::put_stream):
/// exactly `len` bytes read from an [`AsyncRead`].
///
/// A backend reads it with [`next_chunk`](Self::next_chunk) until `None`,
/// then calls [`finish`](Self::finish), which checks that the reader really
/// ended at `len` and returns the SHA-256 of everything read. Every chunk
/// is hashed as it passes, so the digest costs no second read. A reader
/// that ends early or goes on past `len` (a file that shrank or grew while
/// it was being stored) is [`BlobError::ChecksumMismatch`]: the bytes are
/// not the ones the put was described with.
pub struct BlobBody {
    reader: Box<dyn AsyncRead + Send + Unpin>,
    len: u64,
    read: u64,
    hasher: Sha256,
}

impl fmt::Debug for BlobBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobBody")
            .field("len", &self.len)
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

impl BlobBody {
    /// A body of `len` bytes from `reader`.
    pub fn new(reader: impl AsyncRead + Send + Unpin + 'static, len: u64) -> Self {
        Self {
            reader: Box::new(reader),
            len,
            read: 0,
            hasher: Sha256::new(),
        }
    }

    /// A body reading an open file from its current position to its end as
    /// of now (its length is taken from its metadata).
    ///
    /// # Errors
    /// When the file's metadata cannot be read.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads metadata; a dropped call closes `file`.
    pub async fn from_file(file: tokio::fs::File) -> io::Result<Self> {
        let len = file.metadata().await?.len();
        Ok(Self::new(file, len))
    }

    /// A body reading the file at `path`.
    ///
    /// # Errors
    /// When the file cannot be opened or its metadata read.
    ///
    /// # Cancel safety
    /// Cancel safe: it only opens and reads; a dropped call closes the file.
    pub async fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        Self::from_file(tokio::fs::File::open(path).await?).await
    }

    /// A body over bytes already in memory.
    pub fn from_bytes(bytes: Bytes) -> Self {
        let len = bytes.len() as u64;
        Self::new(io::Cursor::new(bytes), len)
    }

    /// The declared length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the declared length is 0.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The next chunk of at most `max` bytes (at least 1), or `None` once
    /// `len` bytes were read. A chunk is shorter than `max` only at the end.
    ///
    /// # Errors
    /// [`BlobError::ChecksumMismatch`] when the reader ends before `len`;
    /// [`BlobError::Body`] when it fails.
    ///
    /// # Cancel safety
    /// Not cancel safe: bytes read before the drop are gone from the body
    /// and not hashed, so a put that goes on with it ends in
    /// `ChecksumMismatch` (nothing stored). Drop the body with the call.
    pub async fn next_chunk(&mut self, key: &BlobKey, max: usize) -> Result<Option<Bytes>> {
        let left = self.len - self.read;
        if left == 0 {
            return Ok(None);
        }
        let want = usize::try_from(left).unwrap_or(usize::MAX).min(max.max(1));
        let mut buf = BytesMut::zeroed(want);
        let mut filled = 0;
        while filled < want {
            let n = self
                .reader
                .read(&mut buf[filled..])
                .await
                .map_err(|source| body_error(key, source))?;
            if n == 0 {
                return Err(BlobError::ChecksumMismatch {
                    key: key.to_string(),
                });
            }
            filled += n;
        }
        self.hasher.update(&buf);
        self.read += want as u64;
        Ok(Some(buf.freeze()))
    }

    /// Checks that the reader ends at `len` and returns the digest of the
    /// bytes read. Call it after [`next_chunk`](Self::next_chunk) returned
    /// `None`.
    ///
    /// # Errors
    /// [`BlobError::ChecksumMismatch`] when not all `len` bytes were read or
    /// the reader has more; [`BlobError::Body`] when it fails.
    ///
    /// # Cancel safety
    /// It consumes the body: a dropped call drops it, and nothing was stored.
    pub async fn finish(mut self, key: &BlobKey) -> Result<Sha256Digest> {
        let mut probe = [0u8; 1];
        let more = self
            .reader
            .read(&mut probe)
            .await
            .map_err(|source| body_error(key, source))?;
        if self.read != self.len || more != 0 {
            return Err(BlobError::ChecksumMismatch {
                key: key.to_string(),
            });
        }
        Ok(Sha256Digest::from_bytes(self.hasher.finalize().into()))
    }

    /// Reads the whole body into memory and checks it, for backends that
    /// buffer (the default [`put_stream`](crate::BlobStore::put_stream)).
    ///
    /// # Errors
    /// As [`next_chunk`](Self::next_chunk) and [`finish`](Self::finish).
    ///
    /// # Cancel safety
    /// It consumes the body: a dropped call drops it and the bytes read so far.
    pub async fn into_bytes(mut self, key: &BlobKey) -> Result<(Bytes, Sha256Digest)> {
        let cap = usize::try_from(self.len).unwrap_or(usize::MAX);
        let mut all = BytesMut::with_capacity(cap.min(64 * 1024 * 1024));
        while let Some(chunk) = self.next_chunk(key, 1024 * 1024).await? {
            all.extend_from_slice(&chunk);
        }
        let digest = self.finish(key).await?;
        Ok((all.freeze(), digest))
    }
}

fn body_error(key: &BlobKey, source: io::Error) -> BlobError {
    BlobError::Body {
        key: key.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> BlobKey {
        BlobKey::new("k").unwrap()
    }

    #[tokio::test]
    async fn chunks_cover_the_body_and_hash_it() {
        let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let mut body = BlobBody::from_bytes(Bytes::from(data.clone()));
        let mut seen = Vec::new();
        while let Some(chunk) = body.next_chunk(&key(), 4096).await.unwrap() {
            assert!(chunk.len() <= 4096);
            seen.extend_from_slice(&chunk);
        }
        assert_eq!(seen, data);
        assert_eq!(body.finish(&key()).await.unwrap(), Sha256Digest::of(&data));
    }

    #[tokio::test]
    async fn a_short_or_long_reader_is_a_mismatch() {
        let short = BlobBody::new(io::Cursor::new(vec![1u8; 10]), 11);
        assert!(matches!(
            short.into_bytes(&key()).await,
            Err(BlobError::ChecksumMismatch { .. })
        ));
        let long = BlobBody::new(io::Cursor::new(vec![1u8; 12]), 11);
        assert!(matches!(
            long.into_bytes(&key()).await,
            Err(BlobError::ChecksumMismatch { .. })
        ));
        let empty = BlobBody::from_bytes(Bytes::new());
        let (bytes, digest) = empty.into_bytes(&key()).await.unwrap();
        assert!(bytes.is_empty());
        assert_eq!(digest, Sha256Digest::of(b""));
    }
}
