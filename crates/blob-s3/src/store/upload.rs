//! The write path of [`S3BlobStore`]: one `PutObject` below the multipart
//! threshold, a multipart upload from it, each request carrying the SHA-256
//! the server checks the bytes against.

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, CompletedMultipartUpload, CompletedPart};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use korvus_blob::{BlobError, BlobKey, PutOptions, Result, Sha256Digest};

use super::{S3BlobStore, SHA256_META};
use crate::error::{write_error, Failure};

/// Most parts S3 accepts in one multipart upload.
const MAX_PARTS: usize = 10_000;

/// Bodies from this size are hashed on a blocking thread, not on the runtime.
const HASH_OFF_RUNTIME_FROM: usize = 256 * 1024;

impl S3BlobStore {
    /// Uploads `bytes` in one `PutObject` request.
    pub(super) async fn put_single(
        &self,
        key: &BlobKey,
        object_key: String,
        bytes: Bytes,
        options: PutOptions,
    ) -> Result<()> {
        self.client
            .put_object()
            .bucket(&self.settings.bucket)
            .key(object_key)
            .content_type(options.content_type)
            .metadata(SHA256_META, options.sha256.to_hex())
            .checksum_algorithm(ChecksumAlgorithm::Sha256)
            .checksum_sha256(BASE64.encode(options.sha256.as_bytes()))
            .body(ByteStream::from(bytes))
            .send()
            .await
            .map_err(|e| write_error("PutObject", key, e))?;
        Ok(())
    }

    /// Uploads `bytes` as a multipart upload; one that fails is aborted, so
    /// only a cancelled one can be left behind.
    pub(super) async fn put_multipart(
        &self,
        key: &BlobKey,
        object_key: String,
        bytes: Bytes,
        options: PutOptions,
    ) -> Result<()> {
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.settings.bucket)
            .key(&object_key)
            .content_type(options.content_type)
            .metadata(SHA256_META, options.sha256.to_hex())
            .checksum_algorithm(ChecksumAlgorithm::Sha256)
            .send()
            .await
            .map_err(|e| write_error("CreateMultipartUpload", key, e))?;
        let Some(upload_id) = created.upload_id().map(str::to_owned) else {
            return Err(BlobError::backend(
                "s3",
                Failure::plain("CreateMultipartUpload", "the response has no upload id"),
            ));
        };
        match self.upload_parts(key, &object_key, &upload_id, bytes).await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.abort(&object_key, &upload_id).await;
                Err(e)
            }
        }
    }

    /// Uploads the parts, `part_concurrency` at a time, and completes the
    /// upload.
    async fn upload_parts(
        &self,
        key: &BlobKey,
        object_key: &str,
        upload_id: &str,
        bytes: Bytes,
    ) -> Result<()> {
        // S3 allows at most 10,000 parts: grow the parts of huge objects.
        let part_size = usize::try_from(self.settings.part_size)
            .unwrap_or(usize::MAX)
            .max(bytes.len().div_ceil(MAX_PARTS));
        let ranges: Vec<(i32, usize, usize)> = (0..bytes.len())
            .step_by(part_size)
            .zip(1..)
            .map(|(start, number)| (number, start, (start + part_size).min(bytes.len())))
            .collect();
        let parts: Vec<CompletedPart> = stream::iter(ranges)
            .map(|(number, start, end)| {
                let chunk = bytes.slice(start..end);
                async move {
                    let checksum = BASE64.encode(digest(chunk.clone()).await?.as_bytes());
                    let out = self
                        .client
                        .upload_part()
                        .bucket(&self.settings.bucket)
                        .key(object_key)
                        .upload_id(upload_id)
                        .part_number(number)
                        .checksum_algorithm(ChecksumAlgorithm::Sha256)
                        .checksum_sha256(&checksum)
                        .body(ByteStream::from(chunk))
                        .send()
                        .await
                        .map_err(|e| write_error("UploadPart", key, e))?;
                    Ok::<_, BlobError>(
                        CompletedPart::builder()
                            .part_number(number)
                            .set_e_tag(out.e_tag().map(str::to_owned))
                            .checksum_sha256(checksum)
                            .build(),
                    )
                }
            })
            .buffered(self.settings.part_concurrency)
            .try_collect()
            .await?;
        self.client
            .complete_multipart_upload()
            .bucket(&self.settings.bucket)
            .key(object_key)
            .upload_id(upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| write_error("CompleteMultipartUpload", key, e))?;
        Ok(())
    }

    /// Aborts a failed multipart upload; a failure here is logged, since the
    /// error the caller gets is the one that made the upload fail.
    async fn abort(&self, object_key: &str, upload_id: &str) {
        let aborted = self
            .client
            .abort_multipart_upload()
            .bucket(&self.settings.bucket)
            .key(object_key)
            .upload_id(upload_id)
            .send()
            .await;
        if let Err(e) = aborted {
            tracing::warn!(
                bucket = %self.settings.bucket,
                object_key,
                error = %Failure::from_sdk("AbortMultipartUpload", &e),
                "could not abort a failed multipart upload; a lifecycle rule must clean it up"
            );
        }
    }
}

/// SHA-256 of `bytes`, off the runtime for large bodies.
pub(super) async fn digest(bytes: Bytes) -> Result<Sha256Digest> {
    if bytes.len() < HASH_OFF_RUNTIME_FROM {
        return Ok(Sha256Digest::of(&bytes));
    }
    tokio::task::spawn_blocking(move || Sha256Digest::of(&bytes))
        .await
        .map_err(|e| BlobError::backend("s3", format!("hashing the body failed: {e}")))
}
