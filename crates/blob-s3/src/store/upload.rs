//! The write path of [`S3BlobStore`]: one `PutObject` below the multipart
//! threshold, a multipart upload from it, each request carrying the SHA-256
//! the server checks the bytes against.

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, CompletedMultipartUpload, CompletedPart};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::Bytes;
use futures::stream::{self, Stream, StreamExt, TryStreamExt};
use korvus_blob::{BlobBody, BlobError, BlobKey, PutOptions, Result, Sha256Digest};

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
            .map_err(|e| write_error("PutObject", &self.target(), key, e))?;
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
        let part_size = self.part_size_for(bytes.len() as u64);
        let chunks = stream::iter(
            (0..bytes.len())
                .step_by(part_size)
                .map(move |start| Ok(bytes.slice(start..(start + part_size).min(bytes.len()))))
                .collect::<Vec<_>>(),
        );
        self.multipart(key, &object_key, &options, chunks).await
    }

    /// Streams `body` up as a multipart upload, `part_concurrency` parts
    /// in flight, hashing it on the way; completes it only when the body
    /// matches `options.sha256`, else aborts it (nothing stored).
    pub(super) async fn put_stream_multipart(
        &self,
        key: &BlobKey,
        object_key: String,
        body: BlobBody,
        options: PutOptions,
    ) -> Result<()> {
        let part_size = self.part_size_for(body.len());
        let (owned_key, expected) = (key.clone(), options.sha256);
        // The body is read in order, one part at a time; after the last
        // part it is checked, and a mismatch is the stream's last item, so
        // the upload fails and is aborted.
        let chunks = stream::unfold(Some(body), move |state| {
            let key = owned_key.clone();
            async move {
                let mut body = state?;
                match body.next_chunk(&key, part_size).await {
                    Ok(Some(chunk)) => Some((Ok(chunk), Some(body))),
                    Ok(None) => match body.finish(&key).await {
                        Ok(digest) if digest == expected => None,
                        Ok(_) => Some((
                            Err(BlobError::ChecksumMismatch {
                                key: key.to_string(),
                            }),
                            None,
                        )),
                        Err(e) => Some((Err(e), None)),
                    },
                    Err(e) => Some((Err(e), None)),
                }
            }
        });
        self.multipart(key, &object_key, &options, chunks).await
    }

    /// One multipart upload of the parts `chunks` yields: started, parts
    /// uploaded, completed; aborted when a part (or the stream) fails, so
    /// only a cancelled upload can be left behind.
    async fn multipart(
        &self,
        key: &BlobKey,
        object_key: &str,
        options: &PutOptions,
        chunks: impl Stream<Item = Result<Bytes>>,
    ) -> Result<()> {
        let upload_id = self.create_upload(key, object_key, options).await?;
        match self.upload_parts(key, object_key, &upload_id, chunks).await {
            Ok(parts) => self.complete(key, object_key, &upload_id, parts).await,
            Err(e) => {
                self.abort(object_key, &upload_id).await;
                Err(e)
            }
        }
    }

    /// The part size for an object of `len` bytes: the configured one, grown
    /// so that no object needs more than S3's 10,000 parts.
    fn part_size_for(&self, len: u64) -> usize {
        let configured = usize::try_from(self.settings.part_size).unwrap_or(usize::MAX);
        let needed = usize::try_from(len.div_ceil(MAX_PARTS as u64)).unwrap_or(usize::MAX);
        configured.max(needed).max(1)
    }

    /// Starts a multipart upload carrying the content type and digest.
    async fn create_upload(
        &self,
        key: &BlobKey,
        object_key: &str,
        options: &PutOptions,
    ) -> Result<String> {
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.settings.bucket)
            .key(object_key)
            .content_type(&options.content_type)
            .metadata(SHA256_META, options.sha256.to_hex())
            .checksum_algorithm(ChecksumAlgorithm::Sha256)
            .send()
            .await
            .map_err(|e| write_error("CreateMultipartUpload", &self.target(), key, e))?;
        created.upload_id().map(str::to_owned).ok_or_else(|| {
            BlobError::backend(
                "s3",
                Failure::plain("CreateMultipartUpload", "the response has no upload id"),
            )
        })
    }

    /// Uploads the parts `chunks` yields, in order, `part_concurrency` at a
    /// time: a chunk is read only when a slot is free, so at most that many
    /// parts are in memory.
    async fn upload_parts(
        &self,
        key: &BlobKey,
        object_key: &str,
        upload_id: &str,
        chunks: impl Stream<Item = Result<Bytes>>,
    ) -> Result<Vec<CompletedPart>> {
        chunks
            .zip(stream::iter(1..))
            .map(|(chunk, number): (Result<Bytes>, i32)| async move {
                let chunk = chunk?;
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
                    .map_err(|e| write_error("UploadPart", &self.target(), key, e))?;
                Ok::<_, BlobError>(
                    CompletedPart::builder()
                        .part_number(number)
                        .set_e_tag(out.e_tag().map(str::to_owned))
                        .checksum_sha256(checksum)
                        .build(),
                )
            })
            .buffered(self.settings.part_concurrency)
            .try_collect()
            .await
    }

    /// Completes a multipart upload from its parts.
    async fn complete(
        &self,
        key: &BlobKey,
        object_key: &str,
        upload_id: &str,
        parts: Vec<CompletedPart>,
    ) -> Result<()> {
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
            .map_err(|e| write_error("CompleteMultipartUpload", &self.target(), key, e))?;
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
                error = %Failure::from_sdk("AbortMultipartUpload", &self.target(), &e),
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

/// Reads the `len` bytes of a small file from its current position and
/// hashes them, in one pass on a blocking thread.
pub(super) async fn read_small(
    key: &BlobKey,
    file: std::fs::File,
    len: u64,
) -> Result<(Bytes, Sha256Digest)> {
    let mut file = file;
    let read = tokio::task::spawn_blocking(move || {
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        let digest = korvus_blob::copy_and_hash(&mut file, &mut bytes, len)?;
        Ok::<_, std::io::Error>((bytes, digest))
    })
    .await
    .map_err(|e| BlobError::backend("s3", format!("reading the file failed: {e}")))?;
    match read {
        Ok((bytes, Some(digest))) => Ok((Bytes::from(bytes), digest)),
        Ok((_, None)) => Err(BlobError::ChecksumMismatch {
            key: key.to_string(),
        }),
        Err(source) => Err(BlobError::Body {
            key: key.to_string(),
            source,
        }),
    }
}
