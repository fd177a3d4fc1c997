//! The S3 backend of korvus blob storage: [`S3BlobStore`] keeps reports,
//! artifacts and archives in a bucket of AWS S3 or any S3-compatible service.
//!
//! # Overview
//!
//! [`S3BlobStore`] implements the [`BlobStore`](korvus_blob::BlobStore) seam
//! of `korvus-blob` with aws-sdk-s3; it is built by an [`S3BlobStoreBuilder`]
//! from a bucket and [`S3Credentials`] (fixed keys, or the AWS default chain),
//! plus an optional key prefix, region, endpoint URL, path-style addressing,
//! the SDK's timeouts and retry configuration, the multipart threshold and
//! part size, and the listing page size. The session layer never sees this
//! crate: it holds an `Arc<dyn BlobStore>` that the embedder built here.
//!
//! # Why it is shaped like this
//!
//! The seam promises that a `put` whose SHA-256 does not match its bytes is
//! refused. Here the server does it: the digest travels as
//! `x-amz-checksum-sha256` (never one the SDK computes from the bytes), and
//! S3's `BadDigest` becomes [`BlobError::ChecksumMismatch`](korvus_blob::BlobError::ChecksumMismatch).
//! The store also checks locally by default, for S3-compatible servers that
//! ignore the header. Objects from 16 MiB go up in parts, which S3 commits
//! atomically, so `put` stays all-or-nothing. Errors carry S3's code and
//! message but nothing from the request, and every `Debug` redacts the keys,
//! so credentials cannot leak into logs. Only this crate depends on the AWS
//! SDK (`cargo xtask tidy` checks it).
//!
//! # Example
//!
//! ```
//! use korvus_blob::BlobKey;
//! use korvus_blob_s3::{S3BlobStore, S3Credentials};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> korvus_blob::Result<()> {
//! // Building makes no request; the first call reaches the server.
//! let blobs = S3BlobStore::builder("korvus-blobs", S3Credentials::fixed("AKID", "SECRET"))
//!     .endpoint_url("http://127.0.0.1:9000")
//!     .force_path_style(true)
//!     .region("eu-central-1")
//!     .key_prefix(BlobKey::new("prod")?)
//!     .build()
//!     .await?;
//! let key = BlobKey::new("incidents/a/report.md")?;
//! assert_eq!(blobs.object_key(&key)?, "prod/incidents/a/report.md");
//! // Hand it to korvus as `Arc<dyn BlobStore>`; `put`, `get`, … then talk to S3.
//! let _seam: std::sync::Arc<dyn korvus_blob::BlobStore> = std::sync::Arc::new(blobs);
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `default-chain` (default) | [`S3Credentials::default_chain`]: credentials and region from the AWS default chain, through `aws-config` (which brings an STS client) |
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

#[cfg(feature = "testing")]
extern crate self as korvus_blob_s3;

mod config;
mod error;
mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use crate::config::{
    S3BlobStoreBuilder, S3Credentials, DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MULTIPART_THRESHOLD, DEFAULT_PART_SIZE, FALLBACK_REGION, MIN_PART_SIZE,
};
pub use crate::store::S3BlobStore;

/// The SDK's configuration types taken by [`S3BlobStoreBuilder::timeouts`]
/// and [`S3BlobStoreBuilder::retry`], re-exported so callers need no direct
/// dependency on the SDK.
pub mod sdk {
    pub use aws_sdk_s3::config::retry::{RetryConfig, RetryMode};
    pub use aws_sdk_s3::config::timeout::TimeoutConfig;
    pub use aws_sdk_s3::Client;
}
