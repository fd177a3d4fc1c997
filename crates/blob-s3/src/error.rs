//! Turning SDK errors into the source of a
//! [`BlobError::Backend`](korvus_blob::BlobError::Backend), classifying
//! them, and mapping them to the seam's errors ([`read_error`],
//! [`write_error`]).
//!
//! The SDK error itself is not kept: [`Failure`] holds only the operation,
//! the HTTP status, S3's error code and message, or the transport failure in
//! words — nothing from the request, so no credential can reach a log line or
//! an error message through it.

use std::fmt;

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use korvus_blob::{BlobError, BlobKey};

/// What the failure means for the seam.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// 404, `NoSuchKey`, `NotFound` — but not `NoSuchBucket`.
    NotFound,
    /// The server refused the bytes because they do not match the checksum
    /// sent with them.
    ChecksumMismatch,
    /// Anything else.
    Other,
}

/// Error codes S3-compatible servers use for a checksum that does not match
/// the bytes (AWS: `BadDigest`; MinIO also `XAmzContentChecksumMismatch`).
const CHECKSUM_CODES: &[&str] = &["BadDigest", "XAmzContentChecksumMismatch"];

/// A failed S3 call, described without secrets.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    operation: &'static str,
    detail: String,
}

impl Failure {
    pub(crate) fn plain(operation: &'static str, detail: impl Into<String>) -> Self {
        Self {
            operation,
            detail: detail.into(),
        }
    }

    pub(crate) fn from_sdk<E>(operation: &'static str, error: &SdkError<E>) -> Self
    where
        E: ProvideErrorMetadata,
    {
        let detail = match error {
            SdkError::ServiceError(service) => {
                let status = error
                    .raw_response()
                    .map(|r| r.status().as_u16().to_string())
                    .unwrap_or_else(|| "?".to_owned());
                let meta = service.err();
                format!(
                    "HTTP {status} {}: {}",
                    meta.code().unwrap_or("(no error code)"),
                    meta.message().unwrap_or("(no message)")
                )
            }
            SdkError::TimeoutError(_) => "timed out (the configured operation timeout)".to_owned(),
            SdkError::DispatchFailure(failure) => {
                let what = if failure.is_timeout() {
                    "timed out"
                } else if failure.is_io() {
                    "could not reach the endpoint"
                } else {
                    "the request could not be sent"
                };
                match failure.as_connector_error() {
                    Some(cause) => format!("{what}: {}", DisplayErrorContext(cause)),
                    None => what.to_owned(),
                }
            }
            SdkError::ResponseError(_) => "the response could not be read".to_owned(),
            SdkError::ConstructionFailure(_) => "the request could not be built".to_owned(),
            _ => "failed".to_owned(),
        };
        Self { operation, detail }
    }

    pub(crate) fn kind<E: ProvideErrorMetadata>(error: &SdkError<E>) -> Kind {
        let SdkError::ServiceError(service) = error else {
            return Kind::Other;
        };
        let code = service.err().code();
        if code.is_some_and(|c| CHECKSUM_CODES.contains(&c)) {
            return Kind::ChecksumMismatch;
        }
        match code {
            Some("NoSuchKey" | "NotFound") => Kind::NotFound,
            Some("NoSuchBucket") => Kind::Other,
            _ if error
                .raw_response()
                .is_some_and(|r| r.status().as_u16() == 404) =>
            {
                Kind::NotFound
            }
            _ => Kind::Other,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S3 {} failed: {}", self.operation, self.detail)
    }
}

impl std::error::Error for Failure {}

/// The seam's error for a failed read of `key`: a missing object is
/// [`BlobError::NotFound`], anything else `Backend`.
pub(crate) fn read_error<E>(operation: &'static str, key: &BlobKey, error: SdkError<E>) -> BlobError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match Failure::kind(&error) {
        Kind::NotFound => BlobError::NotFound {
            key: key.to_string(),
        },
        _ => BlobError::backend("s3", Failure::from_sdk(operation, &error)),
    }
}

/// The seam's error for a failed write of `key`: bytes the server refused
/// for their checksum are [`BlobError::ChecksumMismatch`], anything else
/// `Backend`.
pub(crate) fn write_error<E>(
    operation: &'static str,
    key: &BlobKey,
    error: SdkError<E>,
) -> BlobError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match Failure::kind(&error) {
        Kind::ChecksumMismatch => BlobError::ChecksumMismatch {
            key: key.to_string(),
        },
        _ => BlobError::backend("s3", Failure::from_sdk(operation, &error)),
    }
}
