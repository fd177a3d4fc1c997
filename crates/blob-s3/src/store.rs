//! [`S3BlobStore`]: the [`BlobStore`] implementation. Reads, deletes and
//! listings are here; the write path (single and multipart uploads) is in
//! [`upload`].

mod list;
mod upload;

use std::fmt;

use async_trait::async_trait;
use aws_sdk_s3::operation::get_object::GetObjectOutput;
use aws_sdk_s3::types::ChecksumMode;
use aws_sdk_s3::Client;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::Bytes;
use korvus_blob::{
    hash_then_rewind, Blob, BlobBody, BlobError, BlobKey, BlobMeta, BlobReader, BlobStore,
    PutFileOptions, PutOptions, Result, Sha256Digest, MAX_KEY_BYTES,
};

use self::upload::{digest, read_small};
use crate::config::{S3BlobStoreBuilder, S3Credentials};
use crate::error::{read_error, Failure, Kind, Target};

/// Name of the user metadata (`x-amz-meta-sha256`) holding the hex SHA-256
/// of the whole object. S3's own `x-amz-checksum-sha256` of a multipart
/// object is a checksum of part checksums, so the metadata is what `get` and
/// `head` report.
pub(crate) const SHA256_META: &str = "sha256";

/// A [`BlobStore`] in an S3 bucket (AWS or any S3-compatible service).
///
/// Build one with [`S3BlobStore::builder`]. Objects live at
/// `<key prefix>/<key>` in the bucket. `put` sends the content type, the
/// SHA-256 as S3's `x-amz-checksum-sha256` (the server refuses bytes that do
/// not match) and as `x-amz-meta-sha256` metadata (what `get`/`head`
/// report); objects from the multipart threshold on go up in parts, each
/// with its own server-checked SHA-256.
///
/// # Cancel safety
/// Dropping a multipart `put` midway leaves an incomplete upload behind: it
/// is invisible to readers and costs storage until a bucket lifecycle rule
/// (`AbortIncompleteMultipartUpload`) removes it. Failed uploads that are not
/// cancelled are aborted by `put` itself.
#[derive(Clone)]
pub struct S3BlobStore {
    client: Client,
    settings: Settings,
}

/// Everything but the client, fixed at build time.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) bucket: String,
    pub(crate) key_prefix: Option<BlobKey>,
    pub(crate) multipart_threshold: u64,
    pub(crate) part_size: u64,
    pub(crate) part_concurrency: usize,
    pub(crate) list_page_size: i32,
    pub(crate) verify_sha256_locally: bool,
}

impl fmt::Debug for S3BlobStore {
    // The SDK client is left out: its configuration is not ours to print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3BlobStore")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The [`BlobMeta`] of `key` from a `GetObject` or `HeadObject` answer:
/// the two are different types with the same accessors.
macro_rules! object_meta {
    ($key:expr, $out:expr) => {
        BlobMeta {
            key: $key.clone(),
            size: $out
                .content_length()
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0),
            content_type: $out.content_type().map(str::to_owned),
            sha256: stored_digest(
                $out.metadata().and_then(|m| m.get(SHA256_META)),
                $out.checksum_sha256(),
            ),
            last_modified: $out.last_modified().and_then(to_system_time),
        }
    };
}

impl S3BlobStore {
    /// The bucket and the region this store is configured for, which its
    /// errors name.
    pub(crate) fn target(&self) -> Target<'_> {
        Target {
            bucket: &self.settings.bucket,
            region: self.client.config().region().map(|r| r.as_ref()),
        }
    }

    /// `GetObject` of `key`: the response (its body unread) and the
    /// object's metadata, `size` as the response declares it.
    async fn get_object(&self, key: &BlobKey) -> Result<(GetObjectOutput, BlobMeta)> {
        let out = self
            .client
            .get_object()
            .bucket(&self.settings.bucket)
            .key(self.object_key(key)?)
            .send()
            .await
            .map_err(|e| read_error("GetObject", &self.target(), key, e))?;
        let meta = object_meta!(key, out);
        Ok((out, meta))
    }

    /// A builder for a store in `bucket` with the given credentials.
    pub fn builder(bucket: impl Into<String>, credentials: S3Credentials) -> S3BlobStoreBuilder {
        S3BlobStoreBuilder::new(bucket, credentials)
    }

    pub(crate) fn from_parts(client: Client, settings: Settings) -> Self {
        Self { client, settings }
    }

    /// The SDK client, for what the seam does not cover (creating the
    /// bucket, lifecycle rules, presigned URLs). Object keys in the bucket
    /// carry the configured key prefix.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.settings.bucket
    }

    /// The configured key prefix, if any.
    pub fn key_prefix(&self) -> Option<&BlobKey> {
        self.settings.key_prefix.as_ref()
    }

    /// The object key in the bucket of `key`: the prefix and the key.
    ///
    /// # Errors
    /// [`BlobError::InvalidKey`] when the prefix makes it longer than S3's
    /// 1,024 bytes.
    pub fn object_key(&self, key: &BlobKey) -> Result<String> {
        let full = match &self.settings.key_prefix {
            Some(prefix) => format!("{prefix}/{key}"),
            None => key.to_string(),
        };
        if full.len() > MAX_KEY_BYTES {
            return Err(BlobError::InvalidKey {
                key: key.as_str().chars().take(200).collect(),
                reason: "is longer than 1024 bytes under the store's key prefix",
            });
        }
        Ok(full)
    }

    /// The store key of an object key in the bucket, `None` when it is not
    /// under the prefix or not a valid [`BlobKey`].
    fn store_key(&self, object_key: &str) -> Option<BlobKey> {
        let rest = match &self.settings.key_prefix {
            Some(prefix) => object_key
                .strip_prefix(prefix.as_str())?
                .strip_prefix('/')?,
            None => object_key,
        };
        match BlobKey::new(rest) {
            Ok(key) => Some(key),
            Err(_) => {
                tracing::warn!(
                    bucket = %self.settings.bucket,
                    object_key,
                    "skipping an object whose key is not a valid blob key"
                );
                None
            }
        }
    }
}

#[async_trait]
impl BlobStore for S3BlobStore {
    /// Uploads in one request below the multipart threshold, in parts from
    /// it. See [`BlobStore::put`].
    ///
    /// # Errors
    /// [`BlobError::ChecksumMismatch`] when the local check or the server
    /// (`BadDigest`) finds that the bytes do not match `options.sha256`;
    /// [`BlobError::InvalidKey`] when the key prefix makes the key too long;
    /// `Backend` otherwise.
    ///
    /// # Cancel safety
    /// Not cancel-safe: a dropped put may or may not have stored the object
    /// (never a part of it), and may leave an incomplete multipart upload.
    async fn put(&self, key: &BlobKey, bytes: Bytes, options: PutOptions) -> Result<()> {
        let object_key = self.object_key(key)?;
        // An empty body has no parts to upload, whatever the threshold.
        let multipart =
            !bytes.is_empty() && bytes.len() as u64 >= self.settings.multipart_threshold;
        if (self.settings.verify_sha256_locally || multipart)
            && digest(bytes.clone()).await? != options.sha256
        {
            return Err(BlobError::ChecksumMismatch {
                key: key.to_string(),
            });
        }
        if multipart {
            self.put_multipart(key, object_key, bytes, options).await
        } else {
            self.put_single(key, object_key, bytes, options).await
        }
    }

    /// Streams a body from the multipart threshold on: parts are read from
    /// the body only as upload slots free up, so at most
    /// `part_concurrency` parts are in memory, and the upload is completed
    /// only when the whole body matched its digest (aborted otherwise).
    /// Smaller bodies are read into memory and sent in one `PutObject`.
    ///
    /// What S3 checks: every part against its own SHA-256 and, for a
    /// single `PutObject`, the whole object. For a multipart object the
    /// whole-object digest is checked by this client while streaming, not
    /// by the server; it is stored as `x-amz-meta-sha256`.
    ///
    /// # Errors
    /// As [`put`](BlobStore::put), and [`BlobError::Body`] when the body's
    /// reader fails.
    async fn put_stream(&self, key: &BlobKey, body: BlobBody, options: PutOptions) -> Result<()> {
        let object_key = self.object_key(key)?;
        if body.is_empty() || body.len() < self.settings.multipart_threshold {
            let (bytes, digest) = body.into_bytes(key).await?;
            if digest != options.sha256 {
                return Err(BlobError::ChecksumMismatch {
                    key: key.to_string(),
                });
            }
            return self.put_single(key, object_key, bytes, options).await;
        }
        self.put_stream_multipart(key, object_key, body, options)
            .await
    }

    /// Below the multipart threshold the file is read and hashed in one
    /// pass on a blocking thread and sent in one `PutObject` with that
    /// digest (the server checks it); from it, hashed first and then
    /// streamed in parts as [`put_stream`](BlobStore::put_stream) does
    /// (two reads).
    ///
    /// # Errors
    /// As [`put_stream`](BlobStore::put_stream).
    async fn put_file(
        &self,
        key: &BlobKey,
        file: std::fs::File,
        len: u64,
        options: PutFileOptions,
    ) -> Result<Sha256Digest> {
        let object_key = self.object_key(key)?;
        if len != 0 && len >= self.settings.multipart_threshold {
            let (file, digest) = hash_then_rewind(key, file, len).await?;
            let body = BlobBody::new(tokio::fs::File::from_std(file), len);
            let put = PutOptions::new(options.content_type, digest).durability(options.durability);
            self.put_stream_multipart(key, object_key, body, put)
                .await?;
            return Ok(digest);
        }
        let (bytes, digest) = read_small(key, file, len).await?;
        let put = PutOptions::new(options.content_type, digest).durability(options.durability);
        self.put_single(key, object_key, bytes, put).await?;
        Ok(digest)
    }

    /// # Errors
    /// [`BlobError::NotFound`] on `NoSuchKey` or 404; `Backend` otherwise
    /// (also when the body breaks off).
    ///
    /// # Cancel safety
    /// Cancel-safe: nothing changes.
    async fn get(&self, key: &BlobKey) -> Result<Blob> {
        let (out, mut meta) = self.get_object(key).await?;
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| {
                BlobError::backend(
                    "s3",
                    Failure::plain("GetObject", format!("reading the body failed: {e}")),
                )
            })?
            .into_bytes();
        meta.size = bytes.len() as u64;
        Ok(Blob { meta, bytes })
    }

    /// Streams the body as S3 sends it; the response's length is the
    /// object's size. A read of an overwritten key keeps the version the
    /// request got (S3 serves one version per GET).
    async fn get_stream(&self, key: &BlobKey) -> Result<BlobReader> {
        let (out, meta) = self.get_object(key).await?;
        Ok(BlobReader {
            meta,
            body: Box::pin(out.body.into_async_read()),
        })
    }

    /// # Errors
    /// [`BlobError::NotFound`] on 404 (a HEAD response has no body, so a
    /// missing bucket looks the same); `Backend` otherwise.
    ///
    /// # Cancel safety
    /// Cancel-safe: nothing changes.
    async fn head(&self, key: &BlobKey) -> Result<BlobMeta> {
        let out = self
            .client
            .head_object()
            .bucket(&self.settings.bucket)
            .key(self.object_key(key)?)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .map_err(|e| read_error("HeadObject", &self.target(), key, e))?;
        Ok(object_meta!(key, out))
    }

    /// # Errors
    /// `Backend`; a missing key (204 or 404) is `Ok`.
    ///
    /// # Cancel safety
    /// Cancel-safe in that a dropped delete either happened or did not.
    async fn delete(&self, key: &BlobKey) -> Result<()> {
        let deleted = self
            .client
            .delete_object()
            .bucket(&self.settings.bucket)
            .key(self.object_key(key)?)
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(()),
            Err(e) if Failure::kind(&e) == Kind::NotFound => Ok(()),
            Err(e) => Err(BlobError::backend(
                "s3",
                Failure::from_sdk("DeleteObject", &self.target(), &e),
            )),
        }
    }

    /// Pages through `ListObjectsV2` with continuation tokens until the
    /// listing is complete. Listings carry no content type or digest. Objects
    /// whose keys are not valid [`BlobKey`]s (written by something else) are
    /// skipped with a warning.
    ///
    /// # Errors
    /// `Backend`, also when the server says a page is truncated but gives no
    /// continuation token.
    ///
    /// # Cancel safety
    /// Cancel-safe: nothing changes.
    async fn list<'a>(&self, prefix: Option<&'a BlobKey>) -> Result<Vec<BlobMeta>> {
        self.list_all(prefix).await
    }

    /// Asks `ListObjectsV2` for the page from the cursor (`StartAfter`),
    /// never more keys than `limit`; more requests only when objects of
    /// the answer are dropped (not whole-segment matches, not valid keys).
    ///
    /// # Errors
    /// `Backend`; `InvalidKey` when `after` is too long under the store's
    /// key prefix.
    ///
    /// # Cancel safety
    /// Cancel-safe: nothing changes.
    async fn list_page<'a>(
        &self,
        prefix: Option<&'a BlobKey>,
        after: Option<&'a BlobKey>,
        limit: usize,
    ) -> Result<Vec<BlobMeta>> {
        self.list_from(prefix, after, limit).await
    }

    /// `DeleteObjects`, 1,000 keys a request, quiet (the server answers
    /// only the failures); a missing key counts as deleted.
    async fn delete_many(&self, keys: &[BlobKey]) -> Vec<(BlobKey, BlobError)> {
        self.delete_batches(keys).await
    }
}

/// An SDK timestamp as a [`SystemTime`](std::time::SystemTime).
fn to_system_time(t: &aws_sdk_s3::primitives::DateTime) -> Option<std::time::SystemTime> {
    std::time::SystemTime::try_from(*t).ok()
}

/// The digest an object was stored with: our metadata, else S3's own
/// checksum when it is a whole-object one (a multipart checksum ends in
/// `-<parts>`).
fn stored_digest(meta_hex: Option<&String>, checksum_b64: Option<&str>) -> Option<Sha256Digest> {
    if let Some(digest) = meta_hex.and_then(|h| h.parse().ok()) {
        return Some(digest);
    }
    let raw = BASE64.decode(checksum_b64?).ok()?;
    Some(Sha256Digest::from_bytes(raw.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_digest_prefers_metadata_and_ignores_multipart_checksums() {
        let d = Sha256Digest::of(b"x");
        let b64 = BASE64.encode(d.as_bytes());
        assert_eq!(stored_digest(Some(&d.to_hex()), None), Some(d));
        assert_eq!(stored_digest(None, Some(&b64)), Some(d));
        assert_eq!(stored_digest(None, Some(&format!("{b64}-3"))), None);
        assert_eq!(stored_digest(Some(&"zz".to_owned()), None), None);
        assert_eq!(stored_digest(None, None), None);
    }
}
